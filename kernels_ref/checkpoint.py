"""Reading Hugging Face-style model folders: `config.json` and safetensors weights (or shards).

Only `safetensors` ever reads tensors here: no pickle, no `torch.load`, no remote code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from kernels_ref.errors import RunnerError

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def parse_dtype(name: str) -> torch.dtype:
    """Map a dtype name (`float32`, `float64`, `bfloat16`, `float16`) to a torch dtype."""
    try:
        return DTYPES[name]
    except KeyError:
        raise RunnerError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}") from None


def parse_device(name: str | torch.device) -> torch.device:
    """A torch device from its name, refusing an unknown one or CUDA where CUDA is absent."""
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise RunnerError(f"unknown device {name!r} ({exc})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunnerError("device 'cuda' requested but CUDA is not available")
    return device


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object, raising `RunnerError` naming the file when it is missing or malformed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunnerError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunnerError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RunnerError(f"{path}: expected a JSON object")
    return data


def eos_token_ids(folder: Path) -> frozenset[int]:
    """The model's `eos_token_id`s: `generation_config.json`, else `config.json`, else none."""
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            eos = read_json(path).get("eos_token_id")
            if eos is not None:
                ids = eos if isinstance(eos, list) else [eos]
                if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                    raise RunnerError(f"{path}: eos_token_id must be an integer or a list of them")
                return frozenset(ids)
    return frozenset()


def read_config(folder: Path) -> dict[str, Any]:
    """The model folder's `config.json`."""
    if not folder.is_dir():
        raise RunnerError(f"{folder}: model folder not found")
    return read_json(folder / "config.json")


def load_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of `model.safetensors`, or of the shards in `model.safetensors.index.json`."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise RunnerError(f"{index}: missing or empty 'weight_map'")
        tensors: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            shard_path = folder / str(shard)
            if Path(str(shard)).name != str(shard):
                raise RunnerError(f"{index}: shard name {shard!r} is not a plain file name")
            loaded = _load_file(shard_path)
            for name, tensor in loaded.items():
                if weight_map.get(name) != shard:
                    raise RunnerError(f"{shard_path}: tensor {name!r} is not mapped to this shard")
                tensors[name] = tensor
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise RunnerError(f"{index}: tensor {missing[0]!r} is mapped but absent from its shard")
        return tensors
    single = folder / "model.safetensors"
    if not single.is_file():
        raise RunnerError(f"{folder}: neither model.safetensors nor model.safetensors.index.json")
    return _load_file(single)


def _load_file(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise RunnerError(f"{path}: file not found") from None
    except (SafetensorError, OSError, ValueError) as exc:
        raise RunnerError(f"{path}: not a readable safetensors file ({exc})") from None


def assign_weights(
    module: nn.Module,
    tensors: dict[str, torch.Tensor],
    where: Path,
    *,
    device: str | torch.device,
    dtype: torch.dtype,
) -> None:
    """Copy `tensors` into `module` by exact name; refuse missing, extra or misshapen ones."""
    expected = module.state_dict()
    for name, param in expected.items():
        if name not in tensors:
            raise RunnerError(f"{where}: missing tensor {name!r}")
        if tuple(tensors[name].shape) != tuple(param.shape):
            raise RunnerError(
                f"{where}: tensor {name!r} has shape {tuple(tensors[name].shape)}, "
                f"the config implies {tuple(param.shape)}"
            )
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise RunnerError(f"{where}: unexpected tensor {extra[0]!r} (not in the architecture)")
    module.load_state_dict({name: t.to(dtype) for name, t in tensors.items()}, strict=True)
    module.to(device=device, dtype=dtype)
    module.eval()
