"""Zero-pad a Qwen3 model's attention heads to a larger head_dim without changing its function.

Engines have attention kernels for some head sizes only (vLLM's CPU attention: 32, 64, 80, ...;
the built-in pair has 16). With `r = new / old` a power of 4, old dim `i` of each head (NeoX RoPE
pairs `(i, i + old/2)`, frequency `theta^(-2i/old)`) moves to new dim `r*i` and old dim
`i + old/2` to `r*i + new/2`: the new pair `(j, j + new/2)` at `j = r*i` has the same frequency.
Every other q/k/v/o dim is zero. The q/k RMSNorm then averages over `r` times as many dims,
all but `old` of them zero: scaling the q and k projections by `sqrt(r)` keeps its mean square,
so eps acts as before, and makes its output `sqrt(r)` times larger, while the softmax scale
`1/sqrt(head_dim)` shrinks by `sqrt(r)`. So k_norm's weight is divided by `sqrt(r)` and q_norm
keeps its weight. Every factor is a power of two, so bf16 weights stay exact and only float32
rounding differs. Tensors outside the attention (embeddings, MLPs, norms, a DFlash drafter's fc
and hidden_norm, DFlash 2's extras) pass through unchanged.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch import Tensor

_ATTENTION = re.compile(r"(?:^|\.)self_attn\.(q_proj|k_proj|v_proj|o_proj|q_norm|k_norm)\.weight$")


def padding_problem(old: int, new: int) -> str | None:
    """Why `old` cannot be padded to `new` exactly, or None."""
    ratio, rest = divmod(new, old)
    if new <= old or rest or ratio & (ratio - 1) or ratio.bit_length() % 2 == 0:
        return (f"head_dim {new} is not {old} times a power of 4 "
                f"(e.g. {old * 4} or {old * 16})")
    return None


def dim_map(old: int, new: int) -> Tensor:
    """The new index of each of a head's `old` dims (RoPE pairs kept together)."""
    ratio, half = new // old, old // 2
    first = torch.arange(half) * ratio
    return torch.cat([first, first + new // 2])


def pad_config(config: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """`config` (a `config.json` dict) with `head_dim` set; refuses what cannot be padded."""
    old = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if problem := padding_problem(old, head_dim):
        raise ValueError(problem)
    if config.get("model_type", "qwen3") != "qwen3":
        raise ValueError("only Qwen3 models (q/k norms) can be padded")
    return {**config, "head_dim": head_dim}


def _scatter_heads(weight: Tensor, heads: int, index: Tensor, new: int, dim: int) -> Tensor:
    """`weight` with its `heads` blocks of `len(index)` along `dim` spread to `new` each."""
    moved = weight.movedim(dim, 0)
    blocks = moved.reshape(heads, len(index), *moved.shape[1:])
    out = blocks.new_zeros(heads, new, *moved.shape[1:])
    out[:, index] = blocks
    return out.reshape(heads * new, *moved.shape[1:]).movedim(0, dim)


def pad_tensors(
    tensors: dict[str, Tensor], config: dict[str, Any], head_dim: int
) -> dict[str, Tensor]:
    """The state dict of the model `config` describes, with its heads padded to `head_dim`."""
    old = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if problem := padding_problem(old, head_dim):
        raise ValueError(problem)
    index = dim_map(old, head_dim)
    heads = {"q_proj": config["num_attention_heads"], "o_proj": config["num_attention_heads"],
             "k_proj": config["num_key_value_heads"], "v_proj": config["num_key_value_heads"]}
    out = {}
    for name, tensor in tensors.items():
        match = _ATTENTION.search(name)
        if match is None:
            out[name] = tensor
            continue
        kind, root = match.group(1), math.sqrt(head_dim // old)
        if kind in ("q_norm", "k_norm"):
            padded = _scatter_heads(tensor, 1, index, head_dim, 0)
        else:
            padded = _scatter_heads(tensor, heads[kind], index, head_dim,
                                    1 if kind == "o_proj" else 0)
        if kind in ("q_proj", "k_proj"):
            padded = padded * root  # the norm's mean square over head_dim stays the same
        elif kind == "k_norm":
            padded = padded / root  # q and k grow by root each, the softmax scale shrinks by it
        out[name] = padded.to(tensor.dtype).contiguous()
    return out


def pad_model(
    config: dict[str, Any], weights: dict[str, Tensor] | bytes, head_dim: int
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """A model's `config.json` dict and weights (a state dict or safetensors bytes), padded."""
    from safetensors.torch import load

    tensors = load(weights) if isinstance(weights, bytes) else weights
    return pad_config(config, head_dim), pad_tensors(tensors, config, head_dim)
