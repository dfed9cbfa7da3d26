"""The built-in tiny target/drafter pair: HF-style folders, byte for byte the same on every run.

The weights are shipped in `fixture_weights/` (trained once by `scripts/train_fixture.py`); this
module copies them and writes the JSON files with sorted keys. `write_pair` also serves tests
that build random-weight pairs of other shapes.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save_file

from kernels_ref.fixtures_dflash2 import DFLASH2_SEED, dflash2_config, dflash2_tensors
from kernels_ref.pad import pad_model
from kernels_ref.tokenizer import tokenizer_json

WEIGHTS = Path(__file__).resolve().parent / "fixture_weights"

SPECIALS = {256: "<|bos|>", 257: "<|endoftext|>", 258: "<|pad|>", 259: "<|mask|>"}
BOS_ID, EOS_ID, PAD_ID, MASK_ID = 256, 257, 258, 259
VOCAB_SIZE = 264  # 256 bytes, 4 specials, padded to a multiple of 8

TARGET_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 128,
    "max_position_embeddings": 256,
    "max_window_layers": 4,
    "model_type": "qwen3",
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": VOCAB_SIZE,
}

DRAFTER_CONFIG: dict[str, Any] = {
    **{k: v for k, v in TARGET_CONFIG.items() if k not in ("architectures", "max_window_layers")},
    "architectures": ["DFlashDraftModel"],
    "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
    "block_size": 8,
    "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": [1, 2]},
    "num_hidden_layers": 2,
    "num_target_layers": 4,
    "tie_word_embeddings": False,
}

GENERATION_CONFIG: dict[str, Any] = {
    "bos_token_id": BOS_ID,
    "do_sample": False,
    "eos_token_id": EOS_ID,
    "pad_token_id": PAD_ID,
    "transformers_version": "4.51.0",
}

CHAT_TEMPLATE = (
    "{% for message in messages %}<|bos|>{{ message['role'] }}\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}"
)


def tokenizer_config() -> dict[str, Any]:
    """`tokenizer_config.json` of the byte-level tokenizer."""
    decoder = {
        str(token_id): {
            "content": name,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token_id, name in SPECIALS.items()
    }
    return {
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [SPECIALS[MASK_ID]],
        "bos_token": SPECIALS[BOS_ID],
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": SPECIALS[EOS_ID],
        "model_max_length": TARGET_CONFIG["max_position_embeddings"],
        "pad_token": SPECIALS[PAD_ID],
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_pair(
    out_dir: Path,
    *,
    target_config: dict[str, Any],
    drafter_config: dict[str, Any],
    target_weights: dict[str, torch.Tensor] | bytes,
    drafter_weights: dict[str, torch.Tensor] | bytes,
) -> tuple[Path, Path]:
    """Write `out_dir/target` and `out_dir/drafter` as HF-style folders; return both paths."""
    target_dir, drafter_dir = out_dir / "target", out_dir / "drafter"
    for folder, config, weights in (
        (target_dir, target_config, target_weights),
        (drafter_dir, drafter_config, drafter_weights),
    ):
        folder.mkdir(parents=True, exist_ok=True)
        _write_json(folder / "config.json", config)
        path = folder / "model.safetensors"
        if isinstance(weights, bytes):
            path.write_bytes(weights)
        else:
            save_file(
                {k: v.contiguous() for k, v in sorted(weights.items())},
                str(path),
                metadata={"format": "pt"},
            )
    _write_json(target_dir / "generation_config.json", GENERATION_CONFIG)
    _write_json(target_dir / "tokenizer.json", tokenizer_json(SPECIALS))
    _write_json(target_dir / "tokenizer_config.json", tokenizer_config())
    (drafter_dir / "dflash.py").write_bytes((WEIGHTS / "dflash.py.txt").read_bytes())
    return target_dir, drafter_dir


def readable_by_all(*folders: Path) -> None:
    """`folders` mode 0755 and every file in them 0644, whatever the umask: an engine running
    as another user reads the pair (the safetensors writer makes 0600)."""
    for folder in folders:
        folder.chmod(0o755)
        for path in folder.iterdir():
            if path.is_file() and not path.is_symlink():
                path.chmod(0o644)


def make_fixture_pair(
    out_dir: Path, *, force: bool = False, dflash2: bool = False, head_dim: int | None = None
) -> tuple[Path, Path]:
    """Write the built-in trained pair to `out_dir/{target,drafter}`; return both folders.

    With `dflash2` the drafter is a DFlash 2 one: the trained drafter plus seeded convolutions
    and candidate selector (`kernels_ref.fixtures_dflash2`), the same bytes on every run. With
    `head_dim` both models' heads are zero-padded to it (`kernels_ref.pad`: same function). Each
    folder is staged next to its final place and moved in whole. An existing `target` or
    `drafter` there is a `FileExistsError` unless `force`, which deletes and rewrites both.
    """
    out_dir = Path(out_dir)
    for name in ("target", "drafter"):
        existing = out_dir / name
        if not force and (existing.exists() or existing.is_symlink()):
            raise FileExistsError(errno.EEXIST, "exists; pass --force to delete and rewrite it",
                                  str(existing))
    out_dir.mkdir(parents=True, exist_ok=True)
    drafter_config: dict[str, Any] = DRAFTER_CONFIG
    trained_drafter = (WEIGHTS / "drafter.safetensors").read_bytes()
    drafter_weights: dict[str, torch.Tensor] | bytes = trained_drafter
    if dflash2:
        context = TARGET_CONFIG["max_position_embeddings"]
        drafter_config = dflash2_config(DRAFTER_CONFIG, context=context)
        drafter_weights = dflash2_tensors(load(trained_drafter), drafter_config, DFLASH2_SEED)
    target_config: dict[str, Any] = TARGET_CONFIG
    target_weights: dict[str, torch.Tensor] | bytes = (WEIGHTS / "target.safetensors").read_bytes()
    if head_dim is not None:
        target_config, target_weights = pad_model(target_config, target_weights, head_dim)
        drafter_config, drafter_weights = pad_model(drafter_config, drafter_weights, head_dim)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".fixtures-") as staging:
        staged = write_pair(
            Path(staging),
            target_config=target_config,
            drafter_config=drafter_config,
            target_weights=target_weights,
            drafter_weights=drafter_weights,
        )
        readable_by_all(*staged)
        for folder in staged:
            final = out_dir / folder.name
            if final.is_dir() and not final.is_symlink():
                shutil.rmtree(final)
            os.replace(folder, final)
    return out_dir / "target", out_dir / "drafter"
