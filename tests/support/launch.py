"""Shared by the launch tests: a lock of Hub artifacts and the policy's `launch` section."""

from __future__ import annotations

import hashlib
from pathlib import Path

from dflash_guard.pins.lockfile import Artifact, LockedFile, Lockfile
from tests.support.trust import write_lock, write_policy

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


TARGET_FILES = {"config.json": b'{"model_type": "qwen3"}'}
DRAFTER_FILES = {"config.json": b'{"block_size": 16, "architectures": ["DFlashDraftModel"]}',
                 "dflash.py": b"class DFlashDraftModel:\n    pass\n"}


def hub_cache_lock(cache: Path, path: Path) -> tuple[Path, dict[str, Path]]:
    """The Hub lock of `hub_lock`'s two repos, with real files in the HF cache `cache` (the
    `hf_env` fixture's): the lockfile and each role's snapshot folder."""
    from tests.support.pins import write_cache_snapshot

    artifacts, snapshots = [], {}
    for role, repo, commit, files in (("target", "Qwen/Qwen3-8B", COMMIT_T, TARGET_FILES),
                                      ("drafter", "z-lab/Qwen3-8B-DFlash-b16", COMMIT_D,
                                       DRAFTER_FILES)):
        snapshots[role] = write_cache_snapshot(cache, repo, commit, files)
        locked = tuple(LockedFile(name, len(data), hashlib.sha256(data).hexdigest())
                       for name, data in sorted(files.items()))
        artifacts.append(Artifact(role, "hub", repo, "main", commit, locked))
    return write_lock(Lockfile(artifacts=tuple(artifacts)), path), snapshots


def confined_policy(folder: Path, *, gguf_comparisons: bool = True) -> Path:
    """The default policy (as `write_policy` writes it) with `launch.confinement: required`:
    `launch --exec` refuses where the engine cannot run under its Landlock ruleset.
    `gguf_comparisons=False`: a GGUF llama.cpp serves needs no comparison record (for tests
    about something else; tests/gate/test_gate_engine_files.py holds that rule)."""
    path = write_policy(folder)
    text = path.read_text()
    if not gguf_comparisons:
        text = text.replace("gguf_requires_comparison: true", "gguf_requires_comparison: false")
    path.write_text(text + "launch:\n  confinement: required\n")
    return path
