"""Loading a target and its DFlash drafter from Hugging Face folders (safetensors only).

`config.json` is parsed into the frozen configs of `config.py` / `drafter.py` / `drafter2.py`
(which refuse what these layers do not implement and bound every size), the safetensors headers'
shapes are checked against the shapes the config implies before any module is allocated, the
weights are copied in by exact name, and nothing from the folder is ever imported or executed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from kernels_ref.checkpoint import (
    assign_weights,
    check_shapes,
    expected_shapes,
    load_tensors,
    parse_device,
    parse_dtype,
    read_config,
    tensor_shapes,
)
from kernels_ref.config import ModelConfig
from kernels_ref.drafter import Drafter, DrafterConfig
from kernels_ref.drafter2 import ARCHITECTURE, Drafter2, Drafter2Config
from kernels_ref.model import Target

M = TypeVar("M", bound=nn.Module)


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    return parse_dtype(dtype) if isinstance(dtype, str) else dtype


def load_target(
    folder: Path | str, device: str | torch.device = "cpu", dtype: str | torch.dtype = "float32"
) -> Target:
    """Load a Qwen3 or Llama target from an HF folder (`config.json` + safetensors weights)."""
    folder = Path(folder)
    config = ModelConfig.for_target(read_config(folder), folder / "config.json")
    return _build(partial(Target, config), folder, device, dtype)


def load_drafter(
    folder: Path | str,
    target: Target,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
) -> Drafter:
    """Load a DFlash drafter folder and check it against `target` (never imports its code).

    `architectures` naming `DFlash2DraftModel` picks the DFlash 2 drafter (`kernels_ref.drafter2`).
    """
    folder = Path(folder)
    raw = read_config(folder)
    v2 = ARCHITECTURE in (raw.get("architectures") or [])
    config = (Drafter2Config if v2 else DrafterConfig).from_dict(raw, folder / "config.json")
    config.check_against(target.config, folder)
    if isinstance(config, Drafter2Config):
        return _build(partial(Drafter2, config), folder, device, dtype)
    return _build(partial(Drafter, config), folder, device, dtype)


def _build(
    build: Callable[[], M], folder: Path, device: str | torch.device, dtype: str | torch.dtype
) -> M:
    """Check the headers' shapes against `build`'s (on the meta device), then build and fill it."""
    torch_device, torch_dtype = parse_device(device), _dtype(dtype)
    check_shapes(expected_shapes(build), tensor_shapes(folder), folder)
    module = build()
    assign_weights(module, load_tensors(folder), folder, device=torch_device, dtype=torch_dtype)
    return module
