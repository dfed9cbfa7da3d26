"""A DFlash 2 drafter for a DFlash v1 drafter's target: its config and deterministic weights.

The v2 drafter keeps every v1 tensor (layers, `fc`, norms) and adds seeded random convolutions
and a seeded random candidate selector. Each convolution starts near the identity (tap 0 of
both sides near 1, the other taps and the per-token coefficients small), so a trained v1
drafter turned v2 still drafts well while every v2 part changes the numbers; the selector's
codebooks are large enough to reorder near-tied candidates.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import Tensor

from kernels_ref.drafter2 import ARCHITECTURE

DFLASH2_SEED = 2  # the built-in DFlash 2 drafter's v2 parts (`fixtures make --dflash2`)

# The published shape (z-lab/Qwen3.8-27B-DFlash2), scaled to the tiny built-in pair.
V2_FIELDS: dict[str, Any] = {
    "conv_group_size": 16,
    "conv_kernel_size": 2,
    "selector_rank": 16,
    "selector_top_k": 4,
}


def dflash2_config(v1: dict[str, Any], *, context: int, **fields: Any) -> dict[str, Any]:
    """The v1 drafter config `v1` as a `DFlash2DraftModel` one, laid out like the published
    configs: `block_size` nested in `dflash_config`, transformers 5 `rope_parameters`, every
    layer `sliding_attention` with a window covering the `context` (so full attention)."""
    raw = copy.deepcopy(v1)
    nested = {**raw.pop("dflash_config"), **V2_FIELDS, **fields}
    nested.setdefault("block_size", raw.pop("block_size"))
    raw.pop("block_size", None)
    raw.pop("auto_map", None)
    theta = raw.pop("rope_theta", 10000.0)
    raw.pop("rope_scaling", None)
    layers = raw["num_hidden_layers"]
    return {
        **raw,
        "architectures": [ARCHITECTURE],
        "dflash_config": nested,
        "is_causal": False,
        "layer_types": ["sliding_attention"] * layers,
        "rope_parameters": {"rope_theta": theta, "rope_type": "default"},
        "sliding_window": context,
        "use_sliding_window": True,
    }


def dflash2_tensors(
    v1_tensors: dict[str, Tensor], config: dict[str, Any], seed: int, selector_scale: float = 0.5
) -> dict[str, Tensor]:
    """`v1_tensors` plus seeded convolution and selector tensors for the v2 `config`."""
    nested = config["dflash_config"]
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    kernel, groups = nested["conv_kernel_size"], hidden // nested["conv_group_size"]
    rank = nested["selector_rank"]
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float) -> Tensor:
        return torch.randn(*shape, generator=generator) * std

    tensors = {name: tensor.float() for name, tensor in v1_tensors.items()}
    for layer in range(config["num_hidden_layers"]):
        for conv in ("attention_conv", "mlp_conv"):
            base = normal(2, kernel, hidden, std=0.1)  # [side, tap, hidden]
            base[:, 0] += 1.0
            prefix = f"layers.{layer}.{conv}"
            tensors[f"{prefix}.base_kernel"] = base
            tensors[f"{prefix}.kernel_projection.weight"] = normal(
                2 * kernel * groups, hidden, std=0.05 / math.sqrt(hidden)
            )
    tensors["candidate_selector.predecessor_codebook"] = normal(vocab, rank, std=selector_scale)
    tensors["candidate_selector.successor_codebook"] = normal(vocab, rank, std=selector_scale)
    tensors["candidate_selector.hidden_projection.weight"] = normal(
        rank, hidden, std=1 / math.sqrt(hidden)
    )
    return tensors
