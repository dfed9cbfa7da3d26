"""Loading a target and its DFlash drafter from Hugging Face folders (safetensors only).

`config.json` is parsed into the frozen configs of `config.py` / `drafter.py` / `drafter2.py`
(which refuse what these layers do not implement), the weights are copied in by exact name, and
nothing from the folder is ever imported or executed.
"""

from __future__ import annotations

from pathlib import Path

import torch

from kernels_ref.checkpoint import (
    assign_weights,
    load_tensors,
    parse_device,
    parse_dtype,
    read_config,
)
from kernels_ref.config import ModelConfig
from kernels_ref.drafter import Drafter, DrafterConfig
from kernels_ref.drafter2 import ARCHITECTURE, Drafter2, Drafter2Config
from kernels_ref.model import Target


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    return parse_dtype(dtype) if isinstance(dtype, str) else dtype


def load_target(
    folder: Path | str, device: str | torch.device = "cpu", dtype: str | torch.dtype = "float32"
) -> Target:
    """Load a Qwen3 or Llama target from an HF folder (`config.json` + safetensors weights)."""
    folder = Path(folder)
    target = Target(ModelConfig.for_target(read_config(folder), folder / "config.json"))
    assign_weights(
        target, load_tensors(folder), folder, device=parse_device(device), dtype=_dtype(dtype)
    )
    return target


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
    drafter = Drafter2(config) if isinstance(config, Drafter2Config) else Drafter(config)
    assign_weights(
        drafter, load_tensors(folder), folder, device=parse_device(device), dtype=_dtype(dtype)
    )
    return drafter
