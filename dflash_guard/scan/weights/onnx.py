"""ONNX models: accepted when the `onnx` package (the format's own) parses the whole file and its
checker accepts the model, and every tensor stored outside it names a file of the scanned folder
inside the model's own folder, as onnxruntime (the runtime that serves ONNX) resolves it.

The file is parsed as `onnx.ModelProto` with no field, at any depth, that onnx.proto does not
define (protobuf skips unknown fields silently, so anything could ride there), then
`onnx.checker.check_model` runs on exactly those bytes (not a second read of the file). Each
external tensor's location must be relative, without `..` out of the model's folder, NUL or
backslash (onnx cuts the path at a NUL, another reader would not), and name, after
normalisation, a file of the same walk (so it is locked and scanned too) that has one hard link
(onnx refuses more) and holds the tensor: offset and length inside the file, and for byte-sized
types a length equal to the tensor's size (onnxruntime/core/framework/tensorprotoutils.cc
`GetExternalDataInfo`, `ValidateExternalDataPathFromDir`). Such files are the model's external
data, raw tensor bytes the runner accepts when no pickle stream is in them.

The checker resolves external data itself, refusing every symlink; in an HF-cache snapshot every
file is one (into the repo's `blobs/`, which onnxruntime follows), so the checker is given the
model's bytes in a temporary folder beside sparse regular files of the data files' sizes: it
checks the graph and the locations, the walk and this module check the real files. Shape
inference (`full_check`) does not run: it is the checker's one pass without a bound.
"""

from __future__ import annotations

import dataclasses
import math
import os
import posixpath
import tempfile
import warnings
from pathlib import Path
from typing import Any

from dflash_guard.fileio import open_binary

MAX_BYTES = 2**31 - 1  # protobuf's limit, and onnx.checker.MAXIMUM_PROTOBUF
MAX_MESSAGES = 10_000_000  # messages walked for unknown fields (a 70B graph has ~100k)
_SUB_BYTE = frozenset({"INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1", "FLOAT6E2M3",
                       "FLOAT6E3M2"})  # packed: only the bounds are checked


@dataclasses.dataclass(frozen=True)
class OnnxModel:
    """The verdict on one ONNX file: `problem` (None when accepted) and the folder-relative
    paths of the external data files it names."""

    problem: str | None
    data_files: frozenset[str] = frozenset()


def check_onnx(path: Path, relative: str | None, listing: frozenset[str]) -> OnnxModel:
    """The verdict on the ONNX file at `path`, `relative` its path in a scanned folder whose
    files are `listing` (None and empty for a file scanned on its own)."""
    import onnx
    from google.protobuf import message  # type: ignore[import-untyped]

    with open_binary(path) as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        return OnnxModel(f"over {MAX_BYTES} bytes (protobuf's limit)")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (message.DecodeError, RecursionError, ValueError) as error:
        return OnnxModel(f"not an ONNX ModelProto: {error}")
    tensors: list[Any] = []
    problem = _walk(model, tensors)
    if problem is not None:
        return OnnxModel(problem)
    folder = posixpath.dirname(relative) if relative is not None else None
    sizes: dict[str, int] = {}  # location (relative to the model) -> the file's size
    for tensor in tensors:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            problem = _external(path.parent, folder, listing, tensor, sizes)
            if problem is not None:
                return OnnxModel(f"tensor {tensor.name!r} {problem}")
    try:
        _check(data, path.name, sizes)
    except (onnx.checker.ValidationError, ValueError, RuntimeError, OSError) as error:
        return OnnxModel(f"onnx.checker refuses it: {_first_line(error)}")
    return OnnxModel(None, frozenset(posixpath.join(folder or "", location)
                                     for location in sizes))


def _check(data: bytes, name: str, sizes: dict[str, int]) -> None:
    """`onnx.checker.check_model` on `data`, the model `name`, with its external data files
    (by location, with their sizes) laid out as sparse files in a temporary folder."""
    import onnx

    if not sizes:
        onnx.checker.check_model(data)
        return
    with tempfile.TemporaryDirectory(prefix="dflash-guard-onnx-") as scratch:
        model = os.path.join(scratch, name)
        with open(model, "wb") as handle:
            handle.write(data)
        for location, size in sizes.items():
            placed = os.path.join(scratch, location)
            os.makedirs(os.path.dirname(placed), exist_ok=True)
            with open(placed, "wb") as handle:
                handle.truncate(size)
        onnx.checker.check_model(model)


def _walk(model: Any, tensors: list[Any]) -> str | None:
    """Why `model` holds a field onnx.proto does not define (at any depth), or None; every
    `TensorProto` found is appended to `tensors`."""
    from google.protobuf import message, unknown_fields

    stack, seen = [model], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_MESSAGES:
            return f"over {MAX_MESSAGES} protobuf messages"
        if len(unknown_fields.UnknownFieldSet(node)):
            return f"an {node.DESCRIPTOR.name} with fields onnx.proto does not define"
        if node.DESCRIPTOR.full_name == "onnx.TensorProto":
            tensors.append(node)
        for field, value in node.ListFields():
            if field.message_type is None:
                continue
            if isinstance(value, message.Message):
                stack.append(value)
            else:  # a repeated field of messages
                stack.extend(value)
    return None


def _external(base: Path, folder: str | None, listing: frozenset[str], tensor: Any,
              sizes: dict[str, int]) -> str | None:
    """Why the external tensor's data is not in a scanned file that holds it (`base` is the
    model's folder on disk, `folder` in the walk, None when scanned alone), or None, with its
    location's size added to `sizes`."""
    from onnx import TensorProto, helper
    from onnx.external_data_helper import ExternalDataInfo

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unknown keys: onnx ignores them, so do we
            info = ExternalDataInfo(tensor)
    except ValueError as error:
        return str(error)
    named = f"stores its data in {info.location!r}"
    if "\0" in info.location or "\\" in info.location:
        return f"{named}: a NUL or backslash, which readers resolve differently"
    location = posixpath.normpath(info.location or ".")
    if location.startswith(("/", "../")) or location in ("..", "."):
        return f"{named}, which is not inside the model's folder"
    if folder is None or posixpath.join(folder, location) not in listing:
        return f"{named}, which is not a file of the scanned folder"
    stat = os.stat(base / location)
    if stat.st_nlink > 1:
        return f"{named}, a file with {stat.st_nlink} hard links (onnx refuses it)"
    if tensor.data_type == TensorProto.STRING:
        return f"{named}: a string tensor, which cannot be stored outside"
    need = None if TensorProto.DataType.Name(tensor.data_type) in _SUB_BYTE else (
        math.prod(tensor.dims) * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize)
    if need is not None and info.length is not None and info.length != need:
        return f"{named} with length {info.length}, but the tensor is {need} bytes"
    offset = info.offset or 0
    end = offset + (info.length if info.length is not None else need or 0)
    if offset > stat.st_size or end > stat.st_size:
        return f"{named} up to byte {end}, past its end ({stat.st_size} bytes)"
    sizes[location] = stat.st_size
    return None


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
