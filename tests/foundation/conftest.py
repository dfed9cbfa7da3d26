"""Fixtures for the foundation tests: tiny HF-style folders, an isolated HF cache, the emulator."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hub_emulator import HubEmulator, git_blob_id, is_lfs, make_repo  # noqa: E402

TARGET_REPO = "acme/tiny-target"
DRAFTER_REPO = "acme/tiny-drafter"
CODE_REPO = "acme/dflash-code"

DFLASH_PY = b'"""Stand-in for the DFlash drafter module (never imported by the tests)."""\n'


def _weights(seed: int, names: tuple[str, ...]) -> bytes:
    rng = np.random.default_rng(seed)
    return save({n: rng.standard_normal((8, 16)).astype(np.float32) for n in names})


def target_files() -> dict[str, bytes]:
    """A tiny Qwen3-style target as HF files."""
    config = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 16, "num_hidden_layers": 1,
              "vocab_size": 8, "model_type": "qwen3"}
    return {
        "config.json": json.dumps(config, indent=2).encode(),
        "model.safetensors": _weights(1, ("model.embed_tokens.weight", "lm_head.weight")),
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE"}}).encode(),
        "tokenizer_config.json": json.dumps({"eos_token": "<|im_end|>"}).encode(),
        "generation_config.json": b'{"do_sample": false}\n',
    }


def drafter_files(auto_map_target: str = "dflash.DFlashDraftModel") -> dict[str, bytes]:
    """A tiny DFlash drafter: weights, a dflash.py and an auto_map naming it."""
    config = {"architectures": ["DFlashDraftModel"], "block_size": 4, "hidden_size": 16,
              "auto_map": {"AutoModel": auto_map_target}}
    return {
        "config.json": json.dumps(config, indent=2).encode(),
        "model.safetensors": _weights(2, ("fc.weight", "norm.weight")),
        "dflash.py": DFLASH_PY,
    }


def write_folder(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def write_cache_snapshot(cache: Path, repo: str, commit: str, files: dict[str, bytes],
                         ref: str | None = "main") -> Path:
    """Hand-build `models--ORG--NAME/{blobs,snapshots/<commit>,refs}` as huggingface_hub does."""
    storage = cache / ("models--" + repo.replace("/", "--"))
    snapshot = storage / "snapshots" / commit
    (storage / "blobs").mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        blob_name = hashlib.sha256(data).hexdigest() if is_lfs(name) else git_blob_id(data)
        (storage / "blobs" / blob_name).write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(storage / "blobs" / blob_name, link.parent))
    if ref:
        (storage / "refs").mkdir(exist_ok=True)
        (storage / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture
def hf_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HF_HOME / HF_HUB_CACHE / the stat cache at tmp folders; returns the hub cache.

    huggingface_hub reads its constants at import, so they are patched too (dflash_guard.hub
    itself reads the environment at each call). Telemetry off: no agent-harnesses fetch.
    """
    from huggingface_hub import constants

    home = tmp_path / "hf-home"
    cache = home / "hub"
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE",
                "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no real Hub
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "dg-cache"))
    monkeypatch.setenv("DFLASH_GUARD_HUB_TIMEOUT", "2")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(home / ".agent_harnesses.json"))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 2)
    return cache


@pytest.fixture
def hub(tmp_path: Path, hf_env: Path, monkeypatch: pytest.MonkeyPatch):
    """A running emulator serving the tiny target, drafter and a remote-code repo.

    `constants.ENDPOINT` stays as imported (the client rewrites its URL template from it);
    dflash_guard.hub passes the endpoint from HF_ENDPOINT explicitly on every call.
    """
    repos = tmp_path / "repos"
    emulator = HubEmulator(repos)
    emulator.commits = {
        TARGET_REPO: make_repo(repos, TARGET_REPO, target_files(), refs=("main", "v1.0")),
        DRAFTER_REPO: make_repo(repos, DRAFTER_REPO, drafter_files()),
        CODE_REPO: make_repo(repos, CODE_REPO, {"dflash.py": DFLASH_PY, "README.md": b"code\n"}),
    }
    emulator.hang_seconds = 4
    emulator.start()
    monkeypatch.setenv("HF_ENDPOINT", emulator.url)
    yield emulator
    emulator.set_fault(None)
    emulator.stop()


@pytest.fixture
def local_pair(tmp_path: Path) -> tuple[Path, Path]:
    """The tiny target and drafter as plain local folders."""
    return (write_folder(tmp_path / "models" / "tiny-target", target_files()),
            write_folder(tmp_path / "models" / "tiny-drafter", drafter_files()))


def cache_leftovers(cache: Path) -> list[str]:
    """Anything in the HF cache that is not a complete entry: staging folders, .incomplete files."""
    if not cache.exists():
        return []
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*")
                  if ".dflash-guard-staging-" in str(p) or p.name.endswith(".incomplete"))
