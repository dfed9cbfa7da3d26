"""Helpers for the pins tests: tiny HF-style folders, HF cache snapshots, repo names."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.hub_emulator import git_blob_id, is_lfs  # noqa: E402

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


def cache_leftovers(cache: Path) -> list[str]:
    """Anything in the HF cache that is not a complete entry: staging folders, .incomplete files."""
    if not cache.exists():
        return []
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*")
                  if ".dflash-guard-staging-" in str(p) or p.name.endswith(".incomplete"))
