"""Reading Hugging Face-style model folders: `config.json` and safetensors weights (or shards).

Only `safetensors` ever reads tensors here: no pickle, no `torch.load`, no remote code. The
headers' shapes are checked against the config before any weight is read or module allocated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import nn
from torch.overrides import TorchFunctionMode

from kernels_ref.errors import RunnerError
from kernels_ref.weight_files import INDEX, indexed_shards, weight_files

T = TypeVar("T")
MAX_JSON_BYTES = 64 * 1024 * 1024  # far above any config (the scan's limit too)

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
    """Read a JSON object of at most MAX_JSON_BYTES, raising `RunnerError` naming the file when
    it is missing, larger, or malformed (nested past the parser's recursion limit included)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise RunnerError(f"{path}: larger than {MAX_JSON_BYTES:,} bytes")
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise RunnerError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
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


def tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape from the safetensors headers alone: no tensor is read.

    The library checks that the header's offsets cover the file exactly, so a shape that
    matches here sizes no more memory than the file holds."""
    return _read_weights(folder, _header_shapes)


def load_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of `model.safetensors`, or of the shards in `model.safetensors.index.json`
    (`kernels_ref.weight_files`: a folder with other `*.safetensors` is refused)."""
    return _read_weights(folder, _load_file)


def _read_weights(folder: Path, read: Callable[[Path], dict[str, T]]) -> dict[str, T]:
    """`read` over the folder's single file or its shards (`weight_files`: a folder with any
    other top-level `*.safetensors` is refused), each tensor where the index maps it."""
    names = weight_files(folder)
    if indexed_shards(folder) is None:
        return read(folder / names[0])
    index = folder / INDEX
    weight_map = read_json(index)["weight_map"]
    found: dict[str, T] = {}
    for shard in names:
        shard_path = folder / shard
        for name, value in read(shard_path).items():
            if weight_map.get(name) != shard:
                raise RunnerError(f"{shard_path}: tensor {name!r} is not mapped to this shard")
            found[name] = value
    missing = sorted(set(weight_map) - set(found))
    if missing:
        raise RunnerError(f"{index}: tensor {missing[0]!r} is mapped but absent from its shard")
    return found


def _unreadable(path: Path, exc: Exception) -> RunnerError:
    if isinstance(exc, FileNotFoundError):
        return RunnerError(f"{path}: file not found")
    return RunnerError(f"{path}: not a readable safetensors file ({exc})")


def _header_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    try:
        with safe_open(str(path), framework="pt") as handle:
            names = handle.keys()  # the handle itself is not iterable
            return {name: tuple(handle.get_slice(name).get_shape()) for name in names}
    except (SafetensorError, OSError, ValueError) as exc:
        raise _unreadable(path, exc) from None


def _load_file(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise _unreadable(path, exc) from None


class _SkipInit(TorchFunctionMode):
    """Every `torch.nn.init` initialiser as a no-op that returns its tensor. On the meta device
    there is nothing to fill, and torch's meta `normal_` (`nn.Embedding`'s initialiser) imports
    torch._dynamo to do nothing: about 2 s of CPU in every difftest of the built-in pair."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


def expected_shapes(build: Callable[[], nn.Module]) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of the module `build` makes, built on the meta device (no memory,
    no initialisation)."""
    with torch.device("meta"), _SkipInit():
        return {name: tuple(t.shape) for name, t in build().state_dict().items()}


def check_shapes(
    expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]], where: Path
) -> None:
    """Refuse a missing, extra or misshapen tensor: `found` must be exactly `expected`."""
    for name, shape in expected.items():
        if name not in found:
            raise RunnerError(f"{where}: missing tensor {name!r}")
        if found[name] != shape:
            raise RunnerError(
                f"{where}: tensor {name!r} has shape {found[name]}, the config implies {shape}"
            )
    extra = sorted(set(found) - set(expected))
    if extra:
        raise RunnerError(f"{where}: unexpected tensor {extra[0]!r} (not in the architecture)")


def assign_weights(
    module: nn.Module,
    tensors: dict[str, torch.Tensor],
    where: Path,
    *,
    device: str | torch.device,
    dtype: torch.dtype,
) -> None:
    """Copy `tensors` into `module` by exact name; refuse missing, extra or misshapen ones."""
    expected = {name: tuple(t.shape) for name, t in module.state_dict().items()}
    check_shapes(expected, {name: tuple(t.shape) for name, t in tensors.items()}, where)
    module.load_state_dict({name: t.to(dtype) for name, t in tensors.items()}, strict=True)
    module.to(device=device, dtype=dtype)
    module.eval()
