"""An engine is also the package it is released as (P6 of the 2026-12-02 attack findings): a
PyPI advisory for `vllm` reaches a locked vLLM commit, decided on a release tag a real clone
proves points at it, else undecided; every entry naming a locked thing gives a verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_guard.audit.run import run_audit
from dflash_guard.pins.lockfile import Artifact, Engine, LockedFile, Lockfile, write_lockfile
from dflash_guard.rules import ADV_AFFECTED, ADV_UNKNOWN
from tests.support.audit import NOW, git, osv, write_feed

VLLM = "https://github.com/vllm-project/vllm.git"


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


def _audit(tmp_path: Path, commit: str, *records, clone: Path | None = None, **lock_options):
    lock = _lock(tmp_path / "dflash.lock", commit, **lock_options)
    feed = write_feed(tmp_path / "feed.json", *records)
    return run_audit(lock, [str(feed)], clones={"vllm": clone} if clone else {}, now=NOW)


def test_p6_a_pypi_advisory_without_a_clone_is_undecided(tmp_path) -> None:
    """The reproduction: `vllm < 0.11.1` against `vllm#v0.11.0` was PASS with 0 undecided."""
    report = _audit(tmp_path, "a1b2" * 10, _pypi("vllm"))
    assert report.ids(ADV_UNKNOWN.id) == ["GHSA-test-vllm"] and not report.passed
    assert "--engine-repo" in report.findings[0].message


@pytest.mark.parametrize(("tags", "verdict"), [
    (["v0.11.0"], "affected"),
    (["v0.11.1"], "clean"),
    (["0.10.2"], "affected"),  # a tag without the `v`
    (["v0.11.0", "v0.11.1"], "unknown"),  # two versions at one commit: no single release
    (["nightly"], "unknown"),  # not a release tag
    ([], "unknown"),
])
def test_the_release_tag_in_the_clone_decides(tmp_path, clone, tags, verdict) -> None:
    path, commit = clone
    for tag in tags:
        git(path, "tag", tag, commit)
    report = _audit(tmp_path, commit, _pypi("vllm"), clone=path)
    assert report.ids(ADV_AFFECTED.id) == (["GHSA-test-vllm"] if verdict == "affected" else [])
    assert report.ids(ADV_UNKNOWN.id) == (["GHSA-test-vllm"] if verdict == "unknown" else [])


def test_the_locks_label_is_not_evidence(tmp_path, clone) -> None:
    """`#v0.11.1` in the lock, but the clone's tag at the commit says 0.11.0: affected."""
    path, commit = clone
    git(path, "tag", "v0.11.0", commit)
    git(path, "commit", "-q", "--allow-empty", "-m", "later")
    git(path, "tag", "v0.11.1")  # on another commit
    report = _audit(tmp_path, commit, _pypi("vllm"), clone=path, ref="v0.11.1")
    assert report.ids(ADV_AFFECTED.id) == ["GHSA-test-vllm"]
    assert "release 0.11.0" in report.findings[0].message


def test_listed_versions_decide_too(tmp_path, clone) -> None:
    path, commit = clone
    git(path, "tag", "v0.9.2", commit)
    listed = _pypi("vllm", ranges=[], versions=["0.9.2"])
    assert _audit(tmp_path, commit, listed, clone=path).ids(ADV_AFFECTED.id) == ["GHSA-test-vllm"]


def test_other_engines_and_ecosystems(tmp_path, clone) -> None:
    path, commit = clone
    git(path, "tag", "v0.5.0", commit)
    sglang = _audit(tmp_path, commit, _pypi("sglang", "GHSA-test-sglang"), clone=path,
                    url="https://github.com/sgl-project/sglang", name="vllm")
    assert sglang.ids(ADV_AFFECTED.id) == ["GHSA-test-sglang"]
    npm = osv("GHSA-test-npm", [{"package": {"ecosystem": "npm", "name": "vllm"},
                                 "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}]}]}])
    assert _audit(tmp_path, commit, npm, clone=path).findings == ()  # another ecosystem's vllm
    llama = _audit(tmp_path, commit, _pypi("vllm"), clone=path,
                   url="https://github.com/ggml-org/llama.cpp")
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
               "--pypi", "vllm", "--introduced", "0", "--fixed", "0.11.1", "--out",
               tmp_path / "pypi.json")
    assert made.exit_code == 0, made.stderr
    result = cli("audit", "--lock", lock, "--advisories", tmp_path / "pypi.json")
    assert result.exit_code == 1 and "DG-ADV-UNKNOWN" in result.stdout
