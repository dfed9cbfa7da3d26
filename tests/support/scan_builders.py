"""Builders for the scan tests: hand-written pickles, checkpoints, configs and code files.

Malicious pickles are written opcode by opcode: nothing dangerous is ever pickled (or unpickled).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dflash_guard.findings import Finding
from dflash_guard.severity import Severity


def _unicode(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE


def gadget_pickle(module: str, name: str, arg: str = "x", protocol: int = 4) -> bytes:
    """A pickle that would call `module.name(arg)` when loaded, in the given protocol."""
    if protocol == 0:
        return f"c{module}\n{name}\n(V{arg}\ntR.".encode()
    if protocol == 1:
        return (
            f"c{module}\n{name}\n(X".encode()
            + struct.pack("<I", len(arg))
            + arg.encode()
            + (b"tR.")
        )
    head = b"\x80" + bytes([protocol])
    if protocol <= 3:
        return head + f"c{module}\n{name}\n".encode() + _unicode(arg) + b"\x85R."
    # protocol 4/5: STACK_GLOBAL over memoized strings fetched back with BINGET
    return (
        head
        + _unicode(module)
        + b"\x94"  # MEMOIZE 0
        + _unicode(name)
        + b"\x94"  # MEMOIZE 1
        + b"0"  # POP (the name) ... then fetch both from the memo
        + b"0"  # POP (the module)
        + b"h\x00h\x01"  # BINGET 0, BINGET 1
        + b"\x93"  # STACK_GLOBAL
        + _unicode(arg)
        + b"\x85R."
    )


def inst_pickle(module: str, name: str, arg: str = "x") -> bytes:
    """Protocol 0 INST: `(Varg\\ni<module>\\n<name>\\n.`"""
    return f"(V{arg}\ni{module}\n{name}\n.".encode()


def findings_at_least(findings: list[Finding], severity: Severity) -> list[Finding]:
    return [f for f in findings if f.severity >= severity]


def write_safetensors(path: Path, tensors: dict[str, tuple[int, ...]] | None = None) -> Path:
    """A small float32 safetensors file written with the library."""
    import numpy as np
    from safetensors.numpy import save_file

    tensors = tensors or {"w": (4, 8), "b": (8,)}
    save_file({k: np.zeros(shape, dtype=np.float32) for k, shape in tensors.items()}, str(path))
    return path


def raw_safetensors(header: bytes | str, data: bytes = b"", length: int | None = None) -> bytes:
    raw = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def write_json(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value))
    return path


BENIGN_MODELING = '''\
"""DFlash drafter: a few bidirectional decoder layers conditioned on target hidden states."""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, rotate_half
from transformers.utils import logging

from .configuration_dflash import DFlashConfig

logger = logging.get_logger(__name__)

__all__ = ["DFlashDraftModel"]

DEFAULT_BLOCK_SIZE = 16
_LAYER_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj")


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Rotary embedding on queries and keys."""
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class DFlashAttention(nn.Module):
    def __init__(self, config: DFlashConfig, layer_idx: int) -> None:
        super().__init__()
        heads = config.num_attention_heads
        self.head_dim = getattr(config, "head_dim", config.hidden_size // heads)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size)
        self.layer_idx = layer_idx

    def forward(self, hidden: torch.Tensor, context: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        kv = torch.cat([context, hidden], dim=1)  # [B, C+S, H]
        q, k, v = self.q_proj(hidden), self.k_proj(kv), self.v_proj(kv)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False)
        return self.o_proj(out)


class DFlashDraftModel(PreTrainedModel):
    config_class = DFlashConfig
    _no_split_modules = ["DFlashAttention"]

    def __init__(self, config: DFlashConfig) -> None:
        super().__init__(config)
        self.layers = nn.ModuleList(
            [DFlashAttention(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = Qwen3MLP(config)
        self.fc = nn.Linear(len(config.dflash_config["target_layer_ids"]) * config.hidden_size,
                            config.hidden_size, bias=False)
        self.post_init()

    @torch.no_grad()
    def forward(self, noise_embedding: torch.Tensor, target_hidden: torch.Tensor) -> torch.Tensor:
        context = self.fc(target_hidden)
        hidden = noise_embedding
        for layer in self.layers:
            hidden = hidden + layer(hidden, context)
        if self.training:
            logger.warning_once("DFlash drafter is meant for inference")
        return self.norm(hidden)
'''


def make_pair(
    root: Path,
    *,
    drafter: dict | None = None,
    target: dict | None = None,
    generation: dict | None = None,
    tokenizer: dict | None = None,
) -> tuple[Path, Path]:
    """A target and a drafter folder with configs (weights: one small safetensors each)."""
    target_dir, drafter_dir = root / "target", root / "drafter"
    target_dir.mkdir(parents=True)
    drafter_dir.mkdir(parents=True)
    write_json(
        target_dir / "config.json",
        {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "vocab_size": 1000,
            "hidden_size": 64,
            "num_hidden_layers": 8,
            "num_attention_heads": 4,
            "head_dim": 16,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
            **(target or {}),
        },
    )
    write_json(
        target_dir / "generation_config.json", {"eos_token_id": [2, 3], **(generation or {})}
    )
    write_json(
        target_dir / "tokenizer_config.json",
        {
            "added_tokens_decoder": {
                "4": {"content": "<|endoftext|>"},
                "5": {"content": "<|pad|>"},
            },
            "eos_token": "<|endoftext|>",
            "pad_token": "<|pad|>",
            **(tokenizer or {}),
        },
    )
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": 1000,
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "head_dim": 16,
        "block_size": 16,
        "num_target_layers": 8,
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [1, 4, 6]},
    }
    for key, value in (drafter or {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    write_json(drafter_dir / "config.json", config)
    write_safetensors(drafter_dir / "model.safetensors", _drafter_tensors(config))
    return target_dir, drafter_dir


def _drafter_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    """Weights shaped as the config declares (one norm per layer and the fc projection)."""
    hidden = config.get("hidden_size") if isinstance(config.get("hidden_size"), int) else 64
    layers = config.get("num_hidden_layers")
    dflash = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    ids = dflash.get("target_layer_ids", config.get("target_layer_ids"))
    tensors: dict[str, tuple[int, ...]] = {
        f"layers.{i}.input_layernorm.weight": (max(hidden, 1),)
        for i in range(layers if isinstance(layers, int) and 0 <= layers <= 64 else 1)
    }
    if isinstance(ids, list) and 0 < hidden <= 4096:
        tensors["fc.weight"] = (hidden, len(ids) * hidden)
    return tensors


def write_gguf(out: Path, build: Callable[[Any], None], arch: str = "llama",
               **options: Any) -> Path:
    """A GGUF at `out` written by gguf-py's writer (`options` its constructor's) with what
    `build` adds to it."""
    import gguf

    writer = gguf.GGUFWriter(str(out), arch, **options)
    build(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def write_vocab_gguf(out: Path, tokens: list[str], *, arch: str = "qwen3",
                     merges: list[str] | None = None, pre: str | None = None,
                     eos: int = 257) -> Path:
    """A vocabulary-only GGUF at `out` (byte-level BPE, no tensors), as a converter writes one."""

    def vocabulary(writer: Any) -> None:
        writer.add_tokenizer_model("gpt2")
        if pre is not None:
            writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        if merges is not None:
            writer.add_token_merges(merges)
        writer.add_eos_token_id(eos)

    return write_gguf(out, vocabulary, arch)
