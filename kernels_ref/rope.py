"""Rotary position embeddings: reading a config's RoPE fields and building the cos/sin tables.

Two RoPE types are implemented: `default` (Qwen3, Llama 2/3) and `llama3` (Llama-3.1's
frequency-band rescaling). Both `config.json` layouts are read the way transformers 5 reads them:
the `rope_parameters` dict (transformers 5: `rope_type`, `rope_theta` inside it) or the older
top-level `rope_theta` plus `rope_scaling` (`type` or `rope_type`). Any other type, a per-layer
(nested) RoPE or a partial rotary factor is refused by name, never approximated. The arithmetic
follows transformers' `modeling_rope_utils.py` (`_compute_default_rope_parameters`,
`_compute_llama3_parameters`) step for step, so fp32 tables agree bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from kernels_ref.errors import RunnerError

DEFAULT_THETA = 10_000.0  # transformers' `default_theta` when a config names none
LLAMA3_FIELDS = ("factor", "low_freq_factor", "high_freq_factor")


@dataclass(frozen=True)
class Rope:
    """A RoPE variant: `kind` `default` or `llama3`; the llama3 fields are unused by `default`."""

    theta: float = DEFAULT_THETA
    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 1.0
    original_max_position_embeddings: int = 0

    @classmethod
    def from_config(cls, raw: Mapping[str, Any], where: Path | str) -> Rope:
        """The RoPE of a `config.json` dict, raising `RunnerError` naming what is unsupported."""
        params = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
        if not isinstance(params, Mapping):
            raise RunnerError(f"{where}: 'rope_parameters'/'rope_scaling' must be an object")
        nested = [key for key, value in params.items() if isinstance(value, Mapping)]
        if nested:
            raise RunnerError(
                f"{where}: per-layer RoPE ({', '.join(map(repr, nested))}) is not supported "
                "by kernels_ref"
            )
        factor = params.get("partial_rotary_factor", raw.get("partial_rotary_factor"))
        if factor not in (None, 1, 1.0):
            raise RunnerError(
                f"{where}: partial_rotary_factor={factor!r} is not supported by kernels_ref"
            )
        theta = _positive(params.get("rope_theta", raw.get("rope_theta", DEFAULT_THETA)),
                          "rope_theta", where)
        kind = params.get("rope_type", params.get("type", "default"))
        if kind == "default":
            return cls(theta=theta)
        if kind != "llama3":
            raise RunnerError(
                f"{where}: rope type {kind!r} is not supported by kernels_ref "
                "(it runs 'default' and 'llama3')"
            )
        original = params.get(
            "original_max_position_embeddings", raw.get("max_position_embeddings")
        )
        values = {name: _positive(params.get(name), name, where) for name in LLAMA3_FIELDS}
        if values["high_freq_factor"] == values["low_freq_factor"]:
            raise RunnerError(f"{where}: llama3 rope needs high_freq_factor != low_freq_factor")
        return cls(
            theta=theta,
            kind=kind,
            original_max_position_embeddings=int(
                _positive(original, "original_max_position_embeddings", where)
            ),
            **values,
        )

    def inverse_frequencies(
        self, head_dim: int, device: torch.device, dtype: torch.dtype
    ) -> Tensor:
        """`[head_dim / 2]` rotation frequencies, computed as transformers does."""
        steps = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).to(dtype)
        inv_freq = 1.0 / (self.theta ** (steps / head_dim))
        if self.kind == "default":
            return inv_freq
        old_context = self.original_max_position_embeddings
        low_freq_wavelen = old_context / self.low_freq_factor
        high_freq_wavelen = old_context / self.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / self.factor, inv_freq)
        smooth = (old_context / wavelen - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(medium, smoothed, scaled)

    def tables(self, positions: Tensor, head_dim: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin `[T, head_dim]` for absolute `positions` `[T]` (rotate-half layout)."""
        work = torch.promote_types(dtype, torch.float32)
        inv_freq = self.inverse_frequencies(head_dim, positions.device, work)
        freqs = positions.to(work)[:, None] * inv_freq[None, :]  # [T, head_dim / 2]
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def _positive(value: Any, name: str, where: Path | str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise RunnerError(f"{where}: rope field {name!r} must be a positive number, not {value!r}")
    return float(value)
