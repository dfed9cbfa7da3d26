"""Random-weight Qwen3 and Llama targets written by transformers itself, and DFlash drafters for
them: the independent side of the kernels_ref parity and family tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from kernels_ref.drafter import Drafter, DrafterConfig

# head_dim 24 != hidden 64 / 4 heads; 2 KV heads (GQA)
SHAPE: dict[str, Any] = {
    "vocab_size": 300,
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 24,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
    "initializer_range": 0.1,  # decisive logits: no near ties for greedy to trip on
    "bos_token_id": 1,
    "eos_token_id": 2,
}
# Llama-3.1's RoPE, with a short original context so the tiny head's bands are all exercised
LLAMA31_ROPE: dict[str, Any] = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
CLASSES = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}


def write_hf_target(
    folder: Path,
    model_type: str,
    *,
    seed: int,
    legacy_rope: bool = False,
    dtype: torch.dtype = torch.float32,
    max_shard_size: str | None = None,
    **config: Any,
) -> Path:
    """Save a random `Qwen3ForCausalLM`/`LlamaForCausalLM` with `save_pretrained`.

    `legacy_rope` rewrites `config.json` to the pre-transformers-5 layout (top-level
    `rope_theta`, `rope_scaling`); `max_shard_size` shards the weights behind an index.
    """
    config_class, model_class = CLASSES[model_type]
    torch.manual_seed(seed)
    model = model_class(config_class(**{**SHAPE, **config}))
    with torch.no_grad():  # RMSNorm weights start at 1; jitter them so a skipped norm shows
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(0.2 * torch.randn_like(param))
    model.to(dtype).save_pretrained(folder, max_shard_size=max_shard_size or "5GB")
    if legacy_rope:
        path = folder / "config.json"
        raw = json.loads(path.read_text(encoding="utf-8"))
        rope = dict(raw.pop("rope_parameters"))
        raw["rope_theta"], kind = rope.pop("rope_theta"), rope.pop("rope_type")
        raw["rope_scaling"] = None if kind == "default" else {"rope_type": kind, **rope}
        path.write_text(json.dumps(raw, indent=2), encoding="utf-8")
    return folder


def write_drafter(
    folder: Path, target: Path, *, seed: int, mask_token_id: int, layer_ids: list[int]
) -> Path:
    """A random DFlash drafter for `target`, configured the way z-lab's are: Qwen3 layers
    (`model_type` qwen3, `DFlashDraftModel`) of the target's shape and RoPE, one layer."""
    target_raw = json.loads((target / "config.json").read_text(encoding="utf-8"))
    keep = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "max_position_embeddings", "vocab_size", "rms_norm_eps",
            "rope_parameters", "rope_theta", "rope_scaling")
    raw = {
        **{key: target_raw[key] for key in keep if key in target_raw},
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_act": "silu",
        "num_hidden_layers": 1,
        "num_target_layers": target_raw["num_hidden_layers"],
        "block_size": 4,
        "tie_word_embeddings": False,
        "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": layer_ids},
    }
    torch.manual_seed(seed)
    drafter = Drafter(DrafterConfig.from_dict(raw, folder))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw, indent=2), encoding="utf-8")
    tensors = {name: t.detach().contiguous() for name, t in drafter.state_dict().items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
