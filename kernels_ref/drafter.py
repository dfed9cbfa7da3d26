"""The DFlash v1 block-diffusion drafter (z-lab/dflash), in plain PyTorch.

A small stack of Qwen3 layers without its own embedding or LM head: it embeds the block
`[anchor, MASK, ...]` with the target's embedding, attends bidirectionally over the fused target
context and the block, and reads logits through its `norm` and the target's head. Each MASK
position predicts the token at its own position. Parameter names are the unprefixed ones of the
published checkpoints: `fc.weight`, `hidden_norm.weight`, `norm.weight`, `layers.N.*`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from kernels_ref.checkpoint import (
    assign_weights,
    load_tensors,
    parse_device,
    parse_dtype,
    read_config,
)
from kernels_ref.compat import compatibility_problems
from kernels_ref.errors import RunnerError
from kernels_ref.model import DecoderLayer, ModelConfig, RMSNorm, Target


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


class DrafterCache:
    """Per drafter layer, the keys and values of the committed context (never of block tokens)."""

    def __init__(self, n_layers: int) -> None:
        self.layers: list[tuple[Tensor, Tensor] | None] = [None] * n_layers
        self.length = 0


class StaticDrafterCache:
    """The drafter's context keys/values in preallocated `[1, n_kv, max_len, head_dim]` buffers.

    A device `length` counts the committed context; drafting attends over the whole buffers with
    a mask hiding the unwritten tail, so a draft step can be captured as a CUDA graph.
    """

    def __init__(
        self, cfg: ModelConfig, max_len: int, *, device: torch.device | str, dtype: torch.dtype
    ) -> None:
        shape = (1, cfg.num_key_value_heads, max_len, cfg.head_dim)
        self.layers = [
            (
                torch.zeros(shape, device=device, dtype=dtype),
                torch.zeros(shape, device=device, dtype=dtype),
            )
            for _ in range(cfg.num_hidden_layers)
        ]
        self.max_len = max_len
        self.length = torch.zeros((), dtype=torch.long, device=device)

    def write(self, kv: list[tuple[Tensor, Tensor]]) -> None:
        """Append one `(k, v)` `[1, n_kv, n, head_dim]` per layer at the current length."""
        n = kv[0][0].shape[2]
        index = self.length + torch.arange(n, device=self.length.device)
        for (keys, values), (k, v) in zip(self.layers, kv, strict=True):
            keys.index_copy_(2, index, k.to(keys.dtype))
            values.index_copy_(2, index, v.to(values.dtype))
        self.length.add_(n)

    def mask(self, t: int) -> Tensor:
        """`[t, max_len + t]`: every block token sees the committed context and the whole block."""
        device = self.length.device
        context = (torch.arange(self.max_len, device=device) < self.length).expand(t, -1)
        return torch.cat([context, torch.ones(t, t, dtype=torch.bool, device=device)], dim=1)


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

    def new_cache(
        self, static: bool = False, max_len: int | None = None
    ) -> DrafterCache | StaticDrafterCache:
        """An empty context cache: growing, or with `static` preallocated for `max_len` tokens."""
        if not static:
            return DrafterCache(len(self.layers))
        weight = self.fc.weight
        return StaticDrafterCache(
            self.config.layers,
            max_len or self.config.layers.max_position_embeddings,
            device=weight.device,
            dtype=weight.dtype,
        )

    def context_kv(self, features: Tensor, positions: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per layer keys/values of context `features` `[B, n, k*hidden]` at `positions` `[n]`."""
        context = self.hidden_norm(self.fc(features))
        layers = self.config.layers
        cos, sin = layers.rope.tables(positions, layers.head_dim, context.dtype)
        return [layer.self_attn.project_kv(context, cos, sin) for layer in self.layers]

    def extend_context(
        self, cache: DrafterCache | StaticDrafterCache, features: Tensor, positions: Tensor
    ) -> None:
        """Append committed context features to the drafter's cache."""
        if isinstance(cache, StaticDrafterCache):
            cache.write(self.context_kv(features, positions))
            return
        for index, (k, v) in enumerate(self.context_kv(features, positions)):
            old = cache.layers[index]
            cache.layers[index] = (
                (k, v)
                if old is None
                else (torch.cat([old[0], k], dim=2), torch.cat([old[1], v], dim=2))
            )
        cache.length += features.shape[1]

    def block_hidden(
        self,
        block: Tensor,
        positions: Tensor,
        context: Sequence[tuple[Tensor, Tensor] | None],
        mask: Tensor | None = None,
    ) -> Tensor:
        """Final-normed hidden states `[B, T, hidden]` of embedded `block` over `context`.

        Attention is bidirectional; `mask` (True = may attend) only serves training, where
        several blocks share one forward.
        """
        layers = self.config.layers
        cos, sin = layers.rope.tables(positions, layers.head_dim, block.dtype)
        x = block
        for layer, prefix in zip(self.layers, context, strict=True):
            x, _, _ = layer(x, cos, sin, prefix, mask)
        return self.norm(x)

    def draft(
        self,
        cache: DrafterCache | StaticDrafterCache,
        target: Target,
        ids: Tensor,
        positions: Tensor,
    ) -> Tensor:
        """Greedy tokens `[T-1]` for the block `ids` `[1, T]` at `positions` `[T]` (on the device,
        no host read: the step a CUDA graph captures)."""
        mask = cache.mask(ids.shape[1]) if isinstance(cache, StaticDrafterCache) else None
        hidden = self.block_hidden(target.model.embed_tokens(ids), positions, cache.layers, mask)
        return target.head(hidden[:, 1:]).argmax(-1)[0]

    def propose(
        self,
        cache: DrafterCache | StaticDrafterCache,
        target: Target,
        anchor: int,
        start: int,
        n: int,
    ) -> list[int]:
        """Greedy draft of the `n` tokens after `anchor`, which sits at position `start`."""
        device = target.model.embed_tokens.weight.device
        ids = torch.tensor([[anchor] + [self.config.mask_token_id] * n], device=device)
        positions = torch.arange(start, start + n + 1, device=device)
        return self.draft(cache, target, ids, positions).tolist()


def load_drafter(
    folder: Path | str,
    target: Target,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
) -> Drafter:
    """Load a DFlash drafter folder and check it against `target` (never imports its code).

    `architectures` naming `DFlash2DraftModel` picks the DFlash 2 drafter (`kernels_ref.drafter2`).
    """
    from kernels_ref import drafter2  # it subclasses Drafter: imported here, not at the top

    folder = Path(folder)
    torch_dtype = parse_dtype(dtype) if isinstance(dtype, str) else dtype
    raw = read_config(folder)
    v2 = drafter2.ARCHITECTURE in (raw.get("architectures") or [])
    parse = drafter2.Drafter2Config.from_dict if v2 else DrafterConfig.from_dict
    config = parse(raw, folder / "config.json")
    config.check_against(target.config, folder)
    v2_config = isinstance(config, drafter2.Drafter2Config)
    drafter = drafter2.Drafter2(config) if v2_config else Drafter(config)
    assign_weights(
        drafter, load_tensors(folder), folder, device=parse_device(device), dtype=torch_dtype
    )
    return drafter
