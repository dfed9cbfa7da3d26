"""Issue 45: an engine is identified and proven a release by evidence the policy trusts (its
release map, a tag signed by a key it lists), never by a URL's spelling, a label or a clone's own
refs (Q5, Q6 and P7 of the 2026-12-06 attack findings)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.pins.lockfile import Engine
from dflash_guard.trust.engines import (
    NO_RULES,
    EngineRules,
    Repository,
    engine_build,
    parse_engine_rules,
)
from dflash_guard.trust.policy import parse_policy
from tests.support.audit import git, make_history
from tests.support.trust import make_key_pair

UPSTREAM = "github.com/vllm-project/vllm"
URL = "https://github.com/vllm-project/vllm.git"
MIRROR = "https://git.example.invalid/mirrors/vllm.git"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return make_history(tmp_path_factory.mktemp("engine") / "repo")


def _rules(**releases: str) -> EngineRules:
    return EngineRules((Repository(UPSTREAM, releases=releases),))


# --- without evidence, nothing is proven (P7) -------------------------------------------------


@pytest.mark.parametrize("ref", ["v0.11.0", "refs/tags/v0.5.3", "b4567", "main",
                                 "refs/heads/main", "master", None, "pr-27342", "#52816"])
def test_no_label_proves_a_release_or_mainline(ref):
    """P7: `#main` or no label was mainline; every label is now an unproven build."""
    build = engine_build(Engine("vllm", URL, "a" * 40, ref), None)
    assert build.pr_head and not build.release and not build.mainline
    assert "proves nothing" in build.how and "--engine-repo vllm=CLONE" in build.how


def test_a_pr_label_is_worded_as_one():
    assert engine_build(Engine("vllm", URL, "a" * 40, "refs/pull/1/head"), None).label_pr
    assert not engine_build(Engine("vllm", URL, "a" * 40, "main"), None).label_pr


# --- the clone's own refs prove nothing (Q6) --------------------------------------------------


@pytest.mark.parametrize("annotated", [False, True])
def test_a_tag_made_in_the_clone_proves_no_release(tmp_path, annotated):
    """Q6: `git tag v0.99.0 C` in the clone made C "release v0.99.0"; an unsigned annotated
    tag, a `main` branch and an `origin` remote pointing upstream change nothing either."""
    clone = tmp_path / "clone"
    clone.mkdir()
    git(clone, "init", "-q", "-b", "main")
    git(clone, "commit", "-q", "--allow-empty", "-m", "x")
    commit = git(clone, "rev-parse", "HEAD")
    git(clone, "remote", "add", "origin", URL)
    git(clone, "update-ref", "refs/remotes/origin/HEAD", commit)
    git(clone, "tag", *(["-a", "-m", "r"] if annotated else []), "v0.99.0", commit)
    build = engine_build(Engine("vllm", URL, commit, "v0.99.0"), clone, _rules())
    assert not build.release and build.pr_head, build.how


def test_a_commit_missing_from_the_clone_is_an_input_error(history):
    with pytest.raises(InputError, match="not in the clone"):
        engine_build(Engine("vllm", URL, "f" * 40, "v1.0.0"), history.path)


# --- the policy's release map -----------------------------------------------------------------


def test_the_release_map_proves_a_release_whatever_the_url_or_label(history):
    rules = _rules(**{"v1.0.0": history.fix})
    for url in (URL, MIRROR, "https://fork.example.invalid/someone/engine"):
        build = engine_build(Engine("x", url, history.fix, "pr-1"), None, rules)
        assert build.release and build.version == "v1.0.0" and build.identity == UPSTREAM


def test_mainline_is_ancestry_of_a_proven_release_in_the_clone(history):
    rules = _rules(**{"v1.0.0": history.fix})
    inside = engine_build(Engine("vllm", URL, history.inside, "main"), history.path, rules)
    assert inside.mainline and not inside.release and not inside.pr_head
    # after the release, or on a branch that never reached it: unproven
    for commit in (history.after, history.side):
        build = engine_build(Engine("vllm", URL, commit, "main"), history.path, rules)
        assert build.pr_head, build.how


def test_a_mirror_counts_only_when_the_policy_declares_it():
    commit = "c" * 40
    assert engine_build(Engine("vllm", MIRROR, commit), None).identity is None
    declared = EngineRules((Repository(UPSTREAM, mirrors=("git.example.invalid/mirrors/vllm",)),))
    assert engine_build(Engine("vllm", MIRROR, commit), None, declared).identity == UPSTREAM
    # renamed upstreams are the same repository
    llama = engine_build(Engine("l", "https://github.com/ggerganov/llama.cpp", commit), None)
    assert llama.identity == "github.com/ggml-org/llama.cpp"


# --- tags signed by a key the policy lists ----------------------------------------------------


def _ssh_key(folder: Path, name: str) -> Path:
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
                   check=True, capture_output=True)
    return key


def _signed_tag(clone: Path, key: Path, name: str, commit: str) -> None:
    git(clone, "-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "tag", "-s", "-m",
        name, name, commit)


@pytest.fixture
def signed(tmp_path):
    history = make_history(tmp_path / "repo")
    release_key, other_key = _ssh_key(tmp_path, "release"), _ssh_key(tmp_path, "other")
    rules = EngineRules((Repository(UPSTREAM, tag_signers=(Path(f"{release_key}.pub"),)),))
    return history, release_key, other_key, rules


def test_a_tag_signed_by_a_policy_key_proves_the_release_it_names(signed):
    history, release_key, _, rules = signed
    _signed_tag(history.path, release_key, "v1.0.0", history.fix)
    build = engine_build(Engine("vllm", MIRROR, history.fix, "main"), history.path, rules)
    assert build.release and build.version == "v1.0.0" and build.identity == UPSTREAM


def test_a_tag_signed_by_another_key_proves_nothing(signed):
    history, _, other_key, rules = signed
    _signed_tag(history.path, other_key, "v1.0.0", history.fix)
    assert not engine_build(Engine("vllm", URL, history.fix), history.path, rules).release


def test_a_signed_tag_counts_for_its_own_name_and_object_not_the_refs(signed):
    """A signed `v1.0.0` re-pointed as ref `v9.9.9` still says v1.0.0; a signed tag of another
    commit, or of a name that is no release, proves nothing here."""
    history, release_key, _, rules = signed
    _signed_tag(history.path, release_key, "v1.0.0", history.fix)
    oid = git(history.path, "rev-parse", "refs/tags/v1.0.0")
    git(history.path, "tag", "-d", "v1.0.0")
    git(history.path, "update-ref", "refs/tags/v9.9.9", oid)
    build = engine_build(Engine("vllm", URL, history.fix), history.path, rules)
    assert build.version == "v1.0.0"
    _signed_tag(history.path, release_key, "nightly", history.after)
    assert not engine_build(Engine("vllm", URL, history.after), history.path, rules).release
    assert not engine_build(Engine("vllm", URL, history.inside), history.path, rules).release


# --- the policy's `engines.repositories` ------------------------------------------------------


def _policy_text(repositories: str) -> str:
    return ("extends: default\nname: mine\nengines:\n  allow_pr_head: false\n"
            f"  require_release: true\n  repositories:\n{repositories}")


def test_the_policy_section_parses(tmp_path):
    _, public = make_key_pair(tmp_path, "tag")
    policy = parse_policy(_policy_text(
        f"    - upstream: {URL}\n      mirrors: [{MIRROR}]\n"
        f"      releases: {{v0.11.0: {'a' * 40}}}\n      tag_signers: [{public.name}]\n"),
        "mine.yaml", tmp_path)
    (repo,) = policy.engine_rules.repositories
    assert repo.upstream == UPSTREAM and repo.mirrors == ("git.example.invalid/mirrors/vllm",)
    assert repo.releases == {"v0.11.0": "a" * 40} and repo.tag_signers == (public,)
    assert ("engines.repositories.tag_signers", public) in policy.files()


@pytest.mark.parametrize(("entry", "error"), [
    ("    - mirrors: []\n", "upstream"),
    (f"    - upstream: {URL}\n      releases: {{v1.0: abc}}\n", "40-hex"),
    (f"    - upstream: {URL}\n      releases: {{latest: {'a' * 40}}}\n", "release name"),
    (f"    - upstream: {URL}\n      tag_signers: [missing.pub]\n", "not found"),
    (f"    - upstream: {URL}\n    - upstream: {URL}\n", "twice"),
    (f"    - upstream: {URL}\n      extra: 1\n", "extra"),
])
def test_a_bad_section_is_an_input_error(tmp_path, entry, error):
    with pytest.raises(InputError, match=error):
        parse_policy(_policy_text(entry), "mine.yaml", tmp_path)


def test_no_section_is_no_evidence():
    assert parse_engine_rules(None) == NO_RULES


def test_an_ollama_pr_branch_build_is_identified_but_unproven():
    """Issue 48: ollama from a PR branch (the security page's #17865) is pinned by commit like
    the other engines; its URL names the upstream, and a PR head is no release."""
    from dflash_guard.pins.resolve import parse_engine

    engine = parse_engine(f"ollama=https://github.com/ollama/ollama@{'b' * 40}#pull/17865/head")
    build = engine_build(engine, None)
    assert build.identity == "github.com/ollama/ollama" and build.label_pr and build.pr_head
    assert build.packages == frozenset({("Go", "github.com/ollama/ollama")})
    released = engine_build(engine, None, EngineRules((Repository(
        "github.com/ollama/ollama", releases={"v0.32.7": "b" * 40}),)))
    assert released.release and released.version == "v0.32.7"
