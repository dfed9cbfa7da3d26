"""The DFlash 2 drafter (`DFlash2DraftModel`), in plain PyTorch.

DFlash 2 keeps the v1 drafter (`kernels_ref.drafter`: fused target context, a bidirectional
block of `[anchor, MASK, ...]`) and adds two parts that only change which tokens get drafted:

- per layer, two grouped dynamic convolutions over the block positions, one wrapping the
  attention sublayer (`attention_conv`) and one wrapping the MLP (`mlp_conv`). Side 0 of each
  convolves the sublayer's normed input, side 1 its output; both sides' per-token coefficients
  are projected from the normed input. Tap t reads the block shifted right by t positions, with
  zeros before the block start (the context is never convolved);
- a candidate selector: per drafted position the head's top-k tokens with their logits as unary
  scores, plus a low-rank pairwise score with the token chosen just before (the anchor for the
  first); the block is read by a greedy walk left to right, so it is not the per-position argmax.

Checkpoint names are z-lab's unprefixed ones: `layers.N.{attention,mlp}_conv.base_kernel`
`[2, kernel, hidden]`, `layers.N.{attention,mlp}_conv.kernel_projection.weight`
`[2 * kernel * G, hidden]` (G = hidden / conv_group_size),
`candidate_selector.predecessor_codebook` and `.successor_codebook` `[vocab, rank]` (no
`.weight`), `candidate_selector.hidden_projection.weight` `[rank, hidden]`. Sliding-window
layers run only where the window covers the whole context (then they are full attention); a
narrower window is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kernels_ref.config import ModelConfig, bounded
from kernels_ref.drafter import Drafter, DrafterConfig
from kernels_ref.errors import RunnerError
from kernels_ref.model import DecoderLayer, KVCache

ARCHITECTURE = "DFlash2DraftModel"
# Bounds on the DFlash 2 sizes that shape parameters (the group size divides hidden_size and
# top-k is at most the vocabulary), refused before they size a module.
MAX_V2_SIZES = {"conv_kernel_size": 1024, "selector_rank": 1 << 16}
_SLIDING_KEYS = ("layer_types", "use_sliding_window", "sliding_window")


@dataclass(frozen=True)
class Drafter2Config(DrafterConfig):
    """A DFlash 2 drafter's config: the v1 fields plus convolution and selector sizes.

    `sliding_window` is the window of sliding-attention layers (None: none); it must cover the
    target's context, which `check_against` enforces.
    """

    conv_group_size: int = 0
    conv_kernel_size: int = 0
    selector_rank: int = 0
    selector_top_k: int = 0
    sliding_window: int | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: Path | str) -> Drafter2Config:
        """Parse a `DFlash2DraftModel` `config.json`; nested `dflash_config` fields win."""
        nested = raw.get("dflash_config")
        if not isinstance(nested, dict):
            raise RunnerError(f"{where}: a DFlash 2 drafter needs a 'dflash_config' object")
        sizes = {}
        for name in ("conv_group_size", "conv_kernel_size", "selector_rank", "selector_top_k"):
            value = nested.get(name, raw.get(name))
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RunnerError(f"{where}: DFlash 2 field {name!r} must be a positive integer")
            sizes[name] = bounded(value, name, MAX_V2_SIZES.get(name), where)
        window = _sliding_window(raw, where)
        # The v1 parser reads the shared fields from a view without the v2-only parts.
        v1_view = {k: v for k, v in raw.items() if k not in (*_SLIDING_KEYS, "architectures")}
        v1_view["block_size"] = nested.get("block_size", raw.get("block_size"))
        v1 = DrafterConfig.from_dict(v1_view, where)
        hidden = v1.layers.hidden_size
        if hidden % sizes["conv_group_size"]:
            raise RunnerError(f"{where}: hidden_size {hidden} is not a multiple of conv_group_size")
        if sizes["selector_top_k"] > v1.layers.vocab_size:
            raise RunnerError(f"{where}: selector_top_k exceeds vocab_size")
        return cls(
            v1.layers,
            v1.block_size,
            v1.num_target_layers,
            v1.mask_token_id,
            v1.target_layer_ids,
            sliding_window=window,
            **sizes,
        )

    def check_against(self, target: ModelConfig, where: Path | str) -> None:
        """The v1 checks, and a sliding window that covers the target's whole context."""
        super().check_against(target, where)
        if self.sliding_window is not None and self.sliding_window < target.max_position_embeddings:
            raise RunnerError(
                f"{where}: sliding_window {self.sliding_window} is shorter than the target's "
                f"context ({target.max_position_embeddings}); kernels_ref runs sliding-window "
                "layers only where the window covers the whole context"
            )


def _sliding_window(raw: dict[str, Any], where: Path | str) -> int | None:
    """The window of the config's sliding layers, None when all layers are full attention."""
    layer_types = raw.get("layer_types") or []
    if not isinstance(layer_types, list):
        raise RunnerError(f"{where}: config field 'layer_types' must be a list")
    others = sorted({str(t) for t in layer_types} - {"full_attention", "sliding_attention"})
    if others:
        raise RunnerError(f"{where}: layer_types {others!r} are not supported by kernels_ref")
    if "sliding_attention" not in layer_types and not raw.get("use_sliding_window"):
        return None
    if raw.get("is_causal") is not False:
        raise RunnerError(f"{where}: sliding-window layers need 'is_causal': false")
    window = raw.get("sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise RunnerError(f"{where}: 'sliding_window' must be a positive integer")
    return window


class BlockConv(nn.Module):
    """Grouped dynamic convolution over block positions, wrapping one sublayer."""

    def __init__(self, hidden: int, kernel: int, group: int) -> None:
        super().__init__()
        self.kernel, self.group, self.groups = kernel, group, hidden // group
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel, hidden))  # [side, tap, hidden]
        self.kernel_projection = nn.Linear(hidden, 2 * kernel * self.groups, bias=False)

    def coefficients(self, normed: Tensor) -> Tensor:
        """Per-token coefficients `[B, T, 2, kernel, G]` of the sublayer's normed input."""
        return self.kernel_projection(normed).view(*normed.shape[:-1], 2, self.kernel, self.groups)

    def convolve(self, x: Tensor, side: int, coefficients: Tensor) -> Tensor:
        """`x` `[B, T, hidden]` convolved along T: sum over taps t of
        `(base[side, t] + coefficient[side, t, group]) * x[position - t]` (zeros before 0)."""
        b, t, hidden = x.shape
        grouped = x.view(b, t, self.groups, self.group)  # [B, T, G, group]
        dynamic = coefficients[:, :, side].unsqueeze(-1)  # [B, T, kernel, G, 1]
        out = torch.zeros_like(grouped)
        for tap in range(self.kernel):
            shifted = F.pad(grouped[:, : t - tap], (0, 0, 0, 0, tap, 0))
            base = self.base_kernel[side, tap].view(self.groups, self.group).to(x.dtype)
            out = out + base * shifted
            out = out + dynamic[:, :, tap] * shifted
        return out.view(b, t, hidden)


class Drafter2Layer(DecoderLayer):
    """A Qwen3 layer whose attention and MLP are each wrapped in a `BlockConv`."""

    def __init__(self, cfg: Drafter2Config) -> None:
        super().__init__(cfg.layers)
        hidden = cfg.layers.hidden_size
        self.attention_conv = BlockConv(hidden, cfg.conv_kernel_size, cfg.conv_group_size)
        self.mlp_conv = BlockConv(hidden, cfg.conv_kernel_size, cfg.conv_group_size)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache, layer: int, mask: Tensor
    ) -> Tensor:
        normed = self.input_layernorm(x)  # [B, T, hidden]
        coeff = self.attention_conv.coefficients(normed)
        attn = self.self_attn(
            self.attention_conv.convolve(normed, 0, coeff), cos, sin, cache, layer, mask
        )
        x = x + self.attention_conv.convolve(attn, 1, coeff)
        normed = self.post_attention_layernorm(x)
        coeff = self.mlp_conv.coefficients(normed)
        mlp = self.mlp(self.mlp_conv.convolve(normed, 0, coeff))
        return x + self.mlp_conv.convolve(mlp, 1, coeff)


class CandidateSelector(nn.Module):
    """Top-k candidates per position, walked greedily with low-rank pairwise scores."""

    unary_weight: Tensor  # a registered buffer

    def __init__(self, cfg: Drafter2Config) -> None:
        super().__init__()
        vocab, rank = cfg.layers.vocab_size, cfg.selector_rank
        self.top_k = cfg.selector_top_k
        self.predecessor_codebook = nn.Parameter(torch.zeros(vocab, rank))
        self.successor_codebook = nn.Parameter(torch.zeros(vocab, rank))
        self.hidden_projection = nn.Linear(cfg.layers.hidden_size, rank, bias=False)
        # The weight of the unary (logit) score: 1, not a checkpoint tensor.
        self.register_buffer("unary_weight", torch.ones(()), persistent=False)

    def walk(self, hidden: Tensor, logits: Tensor, anchor: Tensor) -> Tensor:
        """Tokens `[n]` for positions with `hidden` `[1, n, hidden]`, `logits` `[1, n, vocab]`
        after the `anchor` `[1]`: at each position the candidate maximising its logit (times
        `unary_weight`) plus `successor[c] . (predecessor[previous] * projection(h))`."""
        unary, candidates = logits.topk(self.top_k, dim=-1)  # [1, n, k] each
        projected = self.hidden_projection(hidden)  # [1, n, rank]
        previous = anchor
        path = []
        for position in range(hidden.shape[1]):
            pairwise = torch.einsum(
                "br,bkr->bk",
                self.predecessor_codebook[previous] * projected[:, position],
                self.successor_codebook[candidates[:, position]],
            )  # [1, k]
            scores = self.unary_weight * unary[:, position] + pairwise
            best = scores.argmax(-1)  # [1]
            previous = candidates[:, position].gather(-1, best[:, None])[:, 0]
            path.append(previous)
        return torch.stack(path, dim=1)[0]


class Drafter2(Drafter):
    """DFlash 2 drafter: the v1 drafter with block convolutions and a candidate selector."""

    config: Drafter2Config

    def __init__(self, cfg: Drafter2Config) -> None:
        super().__init__(cfg)
        self.layers = nn.ModuleList(Drafter2Layer(cfg) for _ in range(cfg.layers.num_hidden_layers))
        self.candidate_selector = CandidateSelector(cfg)

    def select(self, hidden: Tensor, logits: Tensor, anchor: Tensor) -> Tensor:
        """The candidate selector's greedy walk, not the per-position argmax."""
        return self.candidate_selector.walk(hidden, logits, anchor)
