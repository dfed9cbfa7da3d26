"""The DFlash v1 block-diffusion drafter (z-lab/dflash), in plain PyTorch.

A small stack of Qwen3 layers without its own embedding or LM head: it embeds the block
`[anchor, MASK, ...]` with the target's embedding, attends bidirectionally over the fused target
context and the block, and reads logits through its `norm` and the target's head. Each MASK
position predicts the token at its own position. Parameter names are the unprefixed ones of the
published checkpoints: `fc.weight`, `hidden_norm.weight`, `norm.weight`, `layers.N.*`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from kernels_ref.compat import compatibility_problems
from kernels_ref.config import ModelConfig, bounded
from kernels_ref.errors import RunnerError
from kernels_ref.model import DecoderLayer, KVCache, RMSNorm, Target

MAX_BLOCK_SIZE = 1024  # a block is drafted in one forward (z-lab's drafters: 16)


@dataclass(frozen=True)
class DrafterConfig:
    """A DFlash drafter's config: its layer shapes plus the DFlash fields."""

    layers: ModelConfig
    block_size: int
    num_target_layers: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: Path | str) -> DrafterConfig:
        """Parse `config.json`; `dflash_config` fields may also sit at top level."""
        nested = raw.get("dflash_config") or {}
        if not isinstance(nested, dict):
            raise RunnerError(f"{where}: 'dflash_config' must be an object")

        def field(name: str) -> Any:
            value = nested.get(name, raw.get(name))
            if value is None:
                raise RunnerError(f"{where}: DFlash field {name!r} is missing")
            return value

        layer_ids = field("target_layer_ids")
        unsupported = {
            "is_causal": bool(raw.get("is_causal")),
            "layer_types": any(t != "full_attention" for t in raw.get("layer_types") or []),
            "input_embedding_scale": nested.get("input_embedding_scale", 1.0) != 1.0,
            "output_multiplier": nested.get("output_multiplier", 1.0) != 1.0,
            "final_logit_softcapping": bool(nested.get("final_logit_softcapping")),
            "DFlash2DraftModel": "DFlash2DraftModel" in (raw.get("architectures") or []),
        }
        for name, bad in unsupported.items():
            if bad:
                raise RunnerError(
                    f"{where}: drafter option {name!r} is not supported by kernels_ref"
                )
        ints = [raw.get("block_size"), raw.get("num_target_layers"), field("mask_token_id")]
        if (
            not isinstance(layer_ids, list)
            or not layer_ids
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in [*layer_ids, *ints])
        ):
            raise RunnerError(
                f"{where}: block_size, num_target_layers, mask_token_id and target_layer_ids "
                "must be integers (target_layer_ids a non-empty list)"
            )
        if raw["block_size"] < 2:
            raise RunnerError(f"{where}: block_size must be at least 2")
        bounded(raw["block_size"], "block_size", MAX_BLOCK_SIZE, where)
        return cls(
            ModelConfig.from_dict(raw, where),
            raw["block_size"],
            raw["num_target_layers"],
            ints[2],
            tuple(layer_ids),
        )

    def check_against(self, target: ModelConfig, where: Path | str) -> None:
        """Refuse a drafter that cannot work with `target` (`kernels_ref.compat` names why)."""
        drafter = {
            **dataclasses.asdict(self.layers),
            "num_target_layers": self.num_target_layers,
            "mask_token_id": self.mask_token_id,
            "target_layer_ids": list(self.target_layer_ids),
        }
        problems = compatibility_problems(drafter, dataclasses.asdict(target))
        if problems:
            messages = "; ".join(problem.message for problem in problems)
            raise RunnerError(f"{where}: drafter does not match its target: {messages}")


class Drafter(nn.Module):
    """DFlash v1 drafter: `fc` fuses target layer outputs; bidirectional layers draft the block."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.config = cfg
        hidden = cfg.layers.hidden_size
        self.fc = nn.Linear(len(cfg.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = RMSNorm(hidden, cfg.layers.rms_norm_eps)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg.layers) for _ in range(cfg.layers.num_hidden_layers)
        )
        self.norm = RMSNorm(hidden, cfg.layers.rms_norm_eps)

    def new_cache(self, max_len: int | None = None, batch: int = 1) -> KVCache:
        """An empty context cache for `max_len` positions (context plus one block)."""
        weight = self.fc.weight
        layers = self.config.layers
        return KVCache(
            layers.num_hidden_layers,
            layers.num_key_value_heads,
            layers.head_dim,
            max_len or layers.max_position_embeddings,
            batch=batch,
            device=weight.device,
            dtype=weight.dtype,
        )

    def extend_context(self, cache: KVCache, features: Tensor, positions: Tensor) -> None:
        """Append the keys/values of committed context `features` `[B, n, k*hidden]` at
        `positions` `[n]` to every layer of `cache`."""
        context = self.hidden_norm(self.fc(features))
        layers = self.config.layers
        cos, sin = layers.rope.tables(positions, layers.head_dim, context.dtype)
        for index, layer in enumerate(self.layers):
            assert isinstance(layer, DecoderLayer)  # nn.ModuleList yields plain Modules
            cache.write(index, *layer.self_attn.project_kv(context, cos, sin))
        cache.advance(features.shape[1])

    def block_hidden(
        self, block: Tensor, positions: Tensor, cache: KVCache, mask: Tensor | None = None
    ) -> Tensor:
        """Final-normed hidden states `[B, T, hidden]` of embedded `block` over the context.

        The block's keys/values are written after the context as scratch (the length does not
        move, so the next `extend_context` overwrites them). Attention is bidirectional over
        context and block; `mask` `[T, max_len]` only serves training, where several blocks
        share one forward.
        """
        layers = self.config.layers
        cos, sin = layers.rope.tables(positions, layers.head_dim, block.dtype)
        mask = cache.block_mask(block.shape[1]) if mask is None else mask
        x = block
        for index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, index, mask)
        return self.norm(x)

    def select(self, hidden: Tensor, logits: Tensor, anchor: Tensor) -> Tensor:
        """The drafted tokens `[n]` from the block's hidden states `[1, n, hidden]` and logits
        `[1, n, vocab]` after `anchor` `[1]`: v1 takes the argmax."""
        return logits.argmax(-1)[0]

    def draft(self, cache: KVCache, target: Target, ids: Tensor, positions: Tensor) -> Tensor:
        """Drafted tokens `[T-1]` for the block `ids` `[1, T]` at `positions` `[T]` (on the
        device, no host read: the step a CUDA graph captures)."""
        hidden = self.block_hidden(target.model.embed_tokens(ids), positions, cache)
        drafted = hidden[:, 1:]  # [1, T-1, hidden]: the MASK positions
        return self.select(drafted, target.head(drafted), ids[:, 0])

    def propose(
        self, cache: KVCache, target: Target, anchor: int, start: int, n: int
    ) -> list[int]:
        """Draft the `n` tokens after `anchor`, which sits at position `start`."""
        device = target.model.embed_tokens.weight.device
        ids = torch.tensor([[anchor] + [self.config.mask_token_id] * n], device=device)
        positions = torch.arange(start, start + n + 1, device=device)
        return self.draft(cache, target, ids, positions).tolist()
