"""Shared by the launch tests: a lock of Hub artifacts and the policy's `launch` section."""

from __future__ import annotations

from pathlib import Path

from dflash_guard.pins.lockfile import Artifact, LockedFile, Lockfile
from tests.support.trust import write_lock

COMMIT_T, COMMIT_D = "a" * 40, "b" * 40
LAUNCH = ("launch:\n  num_speculative_tokens: 7\n"
          "  vllm: {max_num_seqs: 8, max_model_len: 256}\n"
          "  llama.cpp: {ctx_size: 512, parallel: 2}\n"
          "  sglang: {max_running_requests: 8}\n")


def hub_lock(path: Path) -> Path:
    """A lock of Hub artifacts (never fetched: the command names them at their commits)."""
    files = (LockedFile("config.json", 2, "c" * 64),)
    lock = Lockfile(artifacts=(
        Artifact("target", "hub", "Qwen/Qwen3-8B", "main", COMMIT_T, files),
        Artifact("drafter", "hub", "z-lab/Qwen3-8B-DFlash-b16", "main", COMMIT_D,
                 (*files, LockedFile("dflash.py", 3, "d" * 64)))))
    return write_lock(lock, path)
