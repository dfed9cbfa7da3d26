"""A decoder's `config.json`, parsed: the families kernels_ref runs and what it refuses.

`Family` says how a Hugging Face family maps onto the shared layers of `model.py` (Qwen3: q/k
norms; Llama: none, optional MLP bias); `ModelConfig` is the parsed config. Anything the layers do
not implement (another `model_type` or architecture, sliding-window or linear-attention layers,
another activation, an unsupported RoPE from `rope.py`) raises `RunnerError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels_ref.errors import RunnerError
from kernels_ref.rope import Rope


@dataclass(frozen=True)
class Family:
    """A decoder family kernels_ref runs: how its `config.json` maps onto the shared layers."""

    model_type: str
    architecture: str  # the HF class a target of this family names in `architectures`
    qk_norm: bool  # per-head RMSNorm on q and k (Qwen3) or none (Llama)
    reads_mlp_bias: bool  # whether the config's `mlp_bias` is honoured (Llama) or ignored
    max_position_embeddings: int  # transformers' default when the config names none


FAMILIES = {
    family.model_type: family
    for family in (
        Family("qwen3", "Qwen3ForCausalLM", qk_norm=True, reads_mlp_bias=False,
               max_position_embeddings=32768),
        Family("llama", "LlamaForCausalLM", qk_norm=False, reads_mlp_bias=True,
               max_position_embeddings=2048),
    )
}
QWEN3 = FAMILIES["qwen3"]  # also the layer family of every DFlash drafter

# Each size's bound, far above any published model (in brackets): a larger number is refused
# before it sizes an allocation or a module (the weights' shapes are checked only afterwards).
MAX_SIZES = {
    "vocab_size": 1 << 22,  # 4,194,304 (Gemma 3: 262,144)
    "hidden_size": 1 << 16,  # 65,536 (Llama 3.1 405B: 16,384)
    "num_hidden_layers": 1024,  # (Llama 3.1 405B: 126)
    "num_attention_heads": 1024,  # (Llama 3.1 405B: 128)
    "num_key_value_heads": 1024,
    "head_dim": 4096,  # (Gemma 2: 256)
    "intermediate_size": 1 << 20,  # 1,048,576 (Llama 3.1 405B: 53,248)
    "max_position_embeddings": 1 << 24,  # 16,777,216 (Llama 4 Scout: 10,485,760)
}
_SIZES = tuple(MAX_SIZES)


@dataclass(frozen=True)
class ModelConfig:
    """The fields a decoder stack needs (HF `config.json` names) plus its family's traits."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float = 1e-6
    rope: Rope = Rope()
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = True
    model_type: str = "qwen3"

    @classmethod
    def for_target(cls, raw: dict[str, Any], where: Path | str) -> ModelConfig:
        """Parse a target's `config.json`: its family from `model_type` (and `architectures`).

        Unsupported layers are named before the family, so a hybrid linear-attention model
        (Qwen3.5, Qwen3-Next) is refused as that rather than as an unknown `model_type`."""
        _refuse_unsupported(raw, where)
        model_type = raw.get("model_type", "qwen3")
        family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
        if family is None:
            raise RunnerError(
                f"{where}: model_type {model_type!r} is not supported by kernels_ref "
                f"(it runs {', '.join(FAMILIES)})"
            )
        architectures = raw.get("architectures") or [family.architecture]
        if architectures != [family.architecture]:
            raise RunnerError(
                f"{where}: architectures {architectures!r} is not supported by kernels_ref "
                f"(a {model_type} target is [{family.architecture!r}])"
            )
        return cls.from_dict(raw, where, family)

    @classmethod
    def from_dict(
        cls, raw: dict[str, Any], where: Path | str, family: Family = QWEN3
    ) -> ModelConfig:
        """Parse the decoder fields of a `config.json` as `family` does, raising `RunnerError`
        naming a bad or unsupported field."""
        _refuse_unsupported(raw, where)
        values: dict[str, Any] = {
            "max_position_embeddings": family.max_position_embeddings,
            "qk_norm": family.qk_norm,
            "model_type": family.model_type,
        }
        for name in (*_SIZES, "rms_norm_eps"):
            if raw.get(name) is not None:
                values[name] = _number(raw[name], name, int if name in _SIZES else float, where)
            elif name not in ("head_dim", "max_position_embeddings", "rms_norm_eps"):
                raise RunnerError(f"{where}: config field {name!r} is missing")
        flags = ("tie_word_embeddings", "attention_bias", *(("mlp_bias",) * family.reads_mlp_bias))
        for name in flags:
            value = raw.get(name, False)
            if not isinstance(value, bool):
                raise RunnerError(f"{where}: config field {name!r} must be bool")
            values[name] = value
        values.setdefault("head_dim", values["hidden_size"] // values["num_attention_heads"])
        config = cls(rope=Rope.from_config(raw, where), **values)
        if config.num_attention_heads % config.num_key_value_heads:
            raise RunnerError(
                f"{where}: num_attention_heads is not a multiple of num_key_value_heads"
            )
        return config


def _number(value: Any, name: str, kind: type, where: Path | str) -> Any:
    """A positive int (sizes, at most `MAX_SIZES`) or number (eps): zero divides, negative
    fails later, a huge size allocates."""
    allowed = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise RunnerError(f"{where}: config field {name!r} must be {kind.__name__}")
    if value <= 0:
        raise RunnerError(f"{where}: config field {name!r} must be positive")
    return bounded(value, name, MAX_SIZES.get(name), where)


def bounded(value: Any, name: str, limit: int | None, where: Path | str) -> Any:
    """`value`, or a `RunnerError` when it exceeds `limit` (None: no limit)."""
    if limit is not None and value > limit:
        raise RunnerError(
            f"{where}: config field {name!r} is {value}, above kernels_ref's limit of {limit}"
        )
    return value


def _refuse_unsupported(raw: dict[str, Any], where: Path | str) -> None:
    """Refuse, by name, a config asking for something these layers do not implement."""
    layer_types = raw.get("layer_types") or []
    if not isinstance(layer_types, list):
        raise RunnerError(f"{where}: config field 'layer_types' must be a list")
    others = sorted({str(t) for t in layer_types} - {"full_attention"})
    if others:
        hybrid = " (hybrid linear attention)" if any("linear" in t for t in others) else ""
        raise RunnerError(
            f"{where}: layer_types {others!r}{hybrid} is not supported by "
            "kernels_ref (it runs full_attention layers only)"
        )
    unsupported = {
        "hidden_act": raw.get("hidden_act", "silu") != "silu",
        "use_sliding_window": bool(raw.get("use_sliding_window")),
        "pretraining_tp": raw.get("pretraining_tp", 1) != 1,
    }
    for name, bad in unsupported.items():
        if bad:
            raise RunnerError(f"{where}: {name}={raw[name]!r} is not supported by kernels_ref")
