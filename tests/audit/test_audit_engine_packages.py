"""An engine is also the package it is released as (P6 of the 2026-12-02 attack findings): a
PyPI advisory for `vllm` reaches a locked vLLM commit, decided on the release the policy's
evidence proves (its release map; `tests/trust/test_engines.py` for signed tags), else
undecided; every entry naming a locked thing gives a verdict. A mirror URL does not escape it
(Q5 of 2026-12-06), and a clone's own tags prove nothing (Q6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_guard.audit.run import run_audit
from dflash_guard.pins.lockfile import Artifact, Engine, LockedFile, Lockfile, write_lockfile
from dflash_guard.rules import ADV_AFFECTED, ADV_UNKNOWN
from dflash_guard.trust.engines import EngineRules, Repository
from dflash_guard.urls import repo_key
from tests.support.audit import NOW, git, osv, write_feed

VLLM = "https://github.com/vllm-project/vllm.git"
UPSTREAM = "github.com/vllm-project/vllm"
MIRROR = "https://git.example.invalid/mirrors/vllm.git"


def _lock(path: Path, commit: str, *, url: str = VLLM, name: str = "vllm",
          ref: str = "v0.11.0") -> Path:
    files = (LockedFile("config.json", 1, "0" * 64),)
    lock = Lockfile(
        artifacts=(Artifact("target", "hub", "org/target", "e" * 40, "e" * 40, files),
                   Artifact("drafter", "hub", "org/drafter", "d" * 40, "d" * 40, files)),
        engines=(Engine(name, url, commit, ref),))
    write_lockfile(lock, path)
    return path


def _pypi(name: str, advisory_id: str = "GHSA-test-vllm", **entry: object) -> dict[str, object]:
    ranges = entry.pop("ranges", [{"type": "ECOSYSTEM",
                                   "events": [{"introduced": "0"}, {"fixed": "0.11.1"}]}])
    return osv(advisory_id, [{"package": {"ecosystem": "PyPI", "name": name}, "ranges": ranges,
                              **entry}])


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, str]:
    """A real repository whose HEAD the lock pins (tags added by each test)."""
    path = tmp_path / "vllm"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "release")
    return path, git(path, "rev-parse", "HEAD")


def _audit(tmp_path: Path, commit: str, *records, clone: Path | None = None,
           releases: dict[str, str] | None = None, upstream: str = UPSTREAM,
           mirrors: tuple[str, ...] = (), **lock_options):
    lock = _lock(tmp_path / "dflash.lock", commit, **lock_options)
    feed = write_feed(tmp_path / "feed.json", *records)
    rules = EngineRules((Repository(upstream, mirrors, releases or {}),))
    return run_audit(lock, [str(feed)], clones={"vllm": clone} if clone else {}, now=NOW,
                     engines=rules)


def test_p6_a_pypi_advisory_without_a_clone_is_undecided(tmp_path) -> None:
    """The reproduction: `vllm < 0.11.1` against `vllm#v0.11.0` was PASS with 0 undecided."""
    report = _audit(tmp_path, "a1b2" * 10, _pypi("vllm"))
    assert report.ids(ADV_UNKNOWN.id) == ["GHSA-test-vllm"] and not report.passed
    assert "--engine-repo" in report.findings[0].message


@pytest.mark.parametrize(("release", "verdict"), [
    ("v0.11.0", "affected"),
    ("v0.11.1", "clean"),
    ("0.10.2", "affected"),  # a name without the `v`
    (None, "unknown"),  # no release pinned for this commit
])
def test_the_policys_release_map_decides(tmp_path, release, verdict) -> None:
    commit = "c" * 40
    report = _audit(tmp_path, commit, _pypi("vllm"),
                    releases={release: commit} if release else {"v0.11.0": "b" * 40})
    assert report.ids(ADV_AFFECTED.id) == (["GHSA-test-vllm"] if verdict == "affected" else [])
    assert report.ids(ADV_UNKNOWN.id) == (["GHSA-test-vllm"] if verdict == "unknown" else [])


@pytest.mark.parametrize("tags", [["v0.11.1"], ["v0.11.0"], []])
def test_q6_the_clones_own_tags_prove_no_release(tmp_path, clone, tags) -> None:
    """Q6: a tag made in the clone (`git tag v0.99.0 C`) decided the version; now nothing in
    the clone does but a tag signed by a policy key, so the advisory stays undecided."""
    path, commit = clone
    for tag in tags:
        git(path, "tag", tag, commit)
    report = _audit(tmp_path, commit, _pypi("vllm"), clone=path)
    assert report.ids(ADV_UNKNOWN.id) == ["GHSA-test-vllm"] and not report.passed


def test_the_locks_label_is_not_evidence(tmp_path) -> None:
    """`#v0.11.1` in the lock, but the policy's map says the commit is 0.11.0: affected."""
    commit = "c" * 40
    report = _audit(tmp_path, commit, _pypi("vllm"), releases={"v0.11.0": commit},
                    ref="v0.11.1")
    assert report.ids(ADV_AFFECTED.id) == ["GHSA-test-vllm"]
    assert "release v0.11.0" in report.findings[0].message


def test_listed_versions_decide_too(tmp_path) -> None:
    commit = "c" * 40
    listed = _pypi("vllm", ranges=[], versions=["0.9.2"])
    report = _audit(tmp_path, commit, listed, releases={"v0.9.2": commit})
    assert report.ids(ADV_AFFECTED.id) == ["GHSA-test-vllm"]


@pytest.mark.parametrize("url", [MIRROR, "https://github.com/someone/vllm-fork",
                                 "git@git.example.invalid:mirrors/vllm",
                                 "https://GitHub.com/vllm-project/vllm-fork.git"])
def test_q5_a_mirror_url_does_not_escape_the_engines_advisories(tmp_path, url) -> None:
    """Q5: the same commit locked from a mirror was PASS, 0 undecided. Now an undeclared URL
    leaves the identity unproven (undecided), a declared mirror is upstream (decided), and a
    commit the release map pins is upstream whatever its URL (decided on that release)."""
    commit = "c" * 40
    unproven = _audit(tmp_path, commit, _pypi("vllm"), url=url)
    assert unproven.ids(ADV_UNKNOWN.id) == ["GHSA-test-vllm"]
    assert "identity is not proven" in unproven.findings[0].message
    git_range_elsewhere = osv("GHSA-git", [{"ranges": [
        {"type": "GIT", "repo": VLLM, "events": [{"introduced": "0"}]}]}])
    assert _audit(tmp_path, commit, git_range_elsewhere, url=url).ids(ADV_UNKNOWN.id) == [
        "GHSA-git"]
    mirrored = _audit(tmp_path, commit, _pypi("vllm"), url=url, mirrors=(repo_key(url),),
                      releases={"v0.11.0": commit})
    assert mirrored.ids(ADV_AFFECTED.id) == ["GHSA-test-vllm"]
    pinned = _audit(tmp_path, commit, _pypi("vllm"), url=url, releases={"v0.11.0": commit})
    assert pinned.ids(ADV_AFFECTED.id) == ["GHSA-test-vllm"]


def test_an_unproven_engine_is_not_undecided_for_unrelated_advisories(tmp_path) -> None:
    """Advisories about a Hub repo or a non-engine package say nothing of an engine."""
    torch = _pypi("torch", "GHSA-torch")
    assert _audit(tmp_path, "c" * 40, torch, url=MIRROR).findings == ()


def test_other_engines_and_ecosystems(tmp_path) -> None:
    commit = "c" * 40
    sglang = _audit(tmp_path, commit, _pypi("sglang", "GHSA-test-sglang"),
                    url="https://github.com/sgl-project/sglang", name="vllm",
                    upstream="github.com/sgl-project/sglang", releases={"v0.5.0": commit})
    assert sglang.ids(ADV_AFFECTED.id) == ["GHSA-test-sglang"]
    npm = osv("GHSA-test-npm", [{"package": {"ecosystem": "npm", "name": "vllm"},
                                 "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}]}]}])
    assert _audit(tmp_path, commit, npm).findings == ()  # another ecosystem's vllm
    llama = _audit(tmp_path, commit, _pypi("vllm"), url="https://github.com/ggml-org/llama.cpp")
    assert llama.findings == ()  # llama.cpp is released as no PyPI package


def test_an_entry_naming_a_subject_always_decides(tmp_path, clone) -> None:
    """Ranges this audit cannot evaluate are undecided, not silently clean."""
    path, commit = clone
    git_only = _pypi("vllm", "GHSA-git-only", ranges=[
        {"type": "GIT", "repo": VLLM, "events": [{"introduced": "0"}]}])
    report = _audit(tmp_path, commit, git_only)
    assert "GHSA-git-only" in report.ids(ADV_UNKNOWN.id) + report.ids(ADV_AFFECTED.id)
    ecosystem_on_git = osv("GHSA-git-eco", [{"package": {"ecosystem": "GIT", "name": VLLM},
                                             "ranges": [{"type": "ECOSYSTEM",
                                                         "events": [{"introduced": "0"}]}]}])
    assert _audit(tmp_path, commit, ecosystem_on_git).ids(ADV_UNKNOWN.id) == ["GHSA-git-eco"]
    bare_hub = osv("x_HF-bare", [{"package": {"ecosystem": "GIT",
                                              "name": "https://huggingface.co/org/drafter",
                                              "purl": "pkg:huggingface/org/drafter"}}])
    assert _audit(tmp_path, commit, bare_hub).ids(ADV_UNKNOWN.id) == ["x_HF-bare"]


def test_the_cli_reproduction(cli, tmp_path) -> None:
    """P6 as written: lock, `advisory new --pypi vllm`, audit: no longer PASS."""
    lock = _lock(tmp_path / "dflash.lock", "a1b2" * 10)
    made = cli("advisory", "new", "--id", "x_VLLM-1", "--summary", "vllm before 0.11.1",
               "--pypi", "vllm", "--introduced", "0", "--fixed", "0.11.1", "--output",
               tmp_path / "pypi.json")
    assert made.exit_code == 0, made.stderr
    result = cli("audit", "--lock", lock, "--advisories", tmp_path / "pypi.json")
    assert result.exit_code == 1 and "DG-ADV-UNKNOWN" in result.stdout
