"""`V=$(bash scripts/install-vllm.sh path)` as docs/vllm.md types it, in a shell where the
project's venv is not activated (newcomer walk, row 25): the script finds the checkout's
.venv itself, and with no dflash-guard anywhere says so in one line, never a traceback."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _checkout(tmp_path: Path, with_venv: bool) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "lockfiles").mkdir()
    shutil.copy(ROOT / "scripts" / "install-vllm.sh", repo / "scripts")
    shutil.copy(ROOT / "scripts" / "cache-install.sh", repo / "scripts")
    shutil.copy(ROOT / "lockfiles" / "vllm.lock", repo / "lockfiles")
    if with_venv:  # the venv `make` builds: a python that has dflash-guard
        python = repo / ".venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
    return repo


def _path(repo: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    nothing = tmp_path / "nothing"  # a python3 without dflash-guard, first on PATH
    nothing.mkdir(exist_ok=True)
    (nothing / "python3").write_text("#!/bin/sh\nexit 1\n")
    (nothing / "python3").chmod(0o755)
    return subprocess.run(
        ["bash", str(repo / "scripts" / "install-vllm.sh"), "path"], cwd=tmp_path,
        capture_output=True, text=True, check=False, timeout=120,
        env={"PATH": f"{nothing}:/usr/bin:/bin", "HOME": str(tmp_path),
             "DFLASH_GUARD_CACHE_DIR": str(tmp_path / "cache"), **env})


def test_no_dflash_guard_anywhere_is_one_line(tmp_path):
    result = _path(_checkout(tmp_path, with_venv=False), tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert "not installed" in result.stderr and ". .venv/bin/activate" in result.stderr


def test_the_checkouts_venv_is_used_without_activating_it(tmp_path):
    repo = _checkout(tmp_path, with_venv=True)
    missing = _path(repo, tmp_path)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert "no finished install" in missing.stderr, missing.stderr
    digest = re.search(r"^digest: sha256:([0-9a-f]{64})$", (repo / "lockfiles" / "vllm.lock")
                       .read_text(), re.M).group(1)
    cache = tmp_path / "cache" / "vllm" / digest
    (cache / "venv" / "bin").mkdir(parents=True)
    (cache / "venv" / "bin" / "python").write_text("#!/bin/sh\n")
    (cache / "venv" / "bin" / "python").chmod(0o755)
    (cache / "install.rc").write_text("0\n")
    ready = _path(repo, tmp_path)
    assert ready.returncode == 0, ready.stderr
    assert ready.stdout.strip() == str(cache / "venv" / "bin" / "python")
