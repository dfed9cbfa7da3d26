"""`flax_model.msgpack`: accepted when the `msgpack` library (the format's own) parses the whole
file as one object, with only the extension types flax itself writes, each holding what flax
puts there.

flax's `serialization.msgpack_serialize` packs a state dict whose leaves are numpy arrays as
`ExtType(1, packb((shape, dtype.name, buffer)))`, numpy scalars as `ExtType(3, ...)` of the same
(a 0-d array) and Python complex numbers as `ExtType(2, packb((real, imag)))`; arrays past its
chunk size become plain maps (`__msgpack_chunked_array__`). `msgpack_restore` reads it back with
`unpackb(raw=False)` and rebuilds each array with `numpy.frombuffer` (flax/serialization.py:
`_msgpack_ext_pack`, `_ndarray_to_bytes`, `_msgpack_ext_unpack`, `_ndarray_from_bytes`). No
step unpickles, but an extension code or a dtype flax does not write is a payload for some other
reader: refused, like any object dtype. The file is read as a stream: lengths, counts and nesting
are capped before anything is allocated, and one object larger than `MAX_OBJECT` makes the file
unprovable here (a possible pickle), not accepted.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dflash_guard.fileio import open_binary

MAX_FILE = 64 * 1024**3  # a few billion parameters in float32
MAX_OBJECT = 1024**3 + 1024**2  # one array chunk (flax chunks larger arrays) plus its header
MAX_ITEMS = 1_000_000  # entries of one map or array (a state dict has thousands)
MAX_NAME = 64 * 1024  # a key or string
MAX_DIMS = 32
# numpy dtype names flax writes for numeric arrays (`arr.dtype.name`; bfloat16 from ml_dtypes).
ITEMSIZE = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "complex64": 8, "complex128": 16,
}
NDARRAY, NATIVE_COMPLEX, NPSCALAR = 1, 2, 3  # flax's _MsgpackExtType


class _Refused(ValueError):
    """The payload of an extension type is not what flax writes there."""


def msgpack_problem(path: Path) -> str | None:
    """Why `path` is not a flax msgpack checkpoint parsed whole, or None."""
    import msgpack

    with open_binary(path) as handle:
        size = handle.seek(0, 2)
        handle.seek(0)
        if size > MAX_FILE:
            return f"over {MAX_FILE} bytes"
        unpacker = msgpack.Unpacker(
            handle, raw=False, strict_map_key=True, ext_hook=_ext, max_buffer_size=MAX_OBJECT,
            max_str_len=MAX_NAME, max_bin_len=MAX_OBJECT, max_array_len=MAX_ITEMS,
            max_map_len=MAX_ITEMS, max_ext_len=MAX_OBJECT)
        end: int | None = None
        try:
            unpacker.unpack()
            end = unpacker.tell()
            unpacker.unpack()
        except msgpack.OutOfData:
            if end is None:
                return "truncated: its object does not end"
            return None if end == size else f"data after its object ends, at byte {end}"
        except msgpack.BufferFull:
            return f"an object over {MAX_OBJECT} bytes (not read here)"
        except _Refused as error:
            return str(error)
        except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as error:
            return f"not msgpack: {type(error).__name__}: {error}"
        return "more than one object (flax writes one)"


def _ext(code: int, data: bytes) -> None:
    """flax's extension types, checked and dropped (only the structure is kept)."""
    if code in (NDARRAY, NPSCALAR):
        _array(data, scalar=code == NPSCALAR)
    elif code == NATIVE_COMPLEX:
        parts = _inner(data)
        if not (isinstance(parts, list) and len(parts) == 2
                and all(isinstance(p, float) for p in parts)):
            raise _Refused("a complex extension that is not (real, imag)")
    else:
        raise _Refused(f"extension type {code}, which flax does not write")


def _array(data: bytes, *, scalar: bool) -> None:
    value = _inner(data)
    if not (isinstance(value, list) and len(value) == 3):
        raise _Refused("an array extension that is not (shape, dtype, buffer)")
    shape, dtype, buffer = value
    if not (isinstance(shape, list) and len(shape) <= MAX_DIMS
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise _Refused("an array extension whose shape is not a list of sizes")
    name = dtype.decode("ascii", "replace") if isinstance(dtype, bytes) else None
    if name not in ITEMSIZE:
        raise _Refused(f"an array of dtype {name or dtype!r}, not a numeric one flax writes")
    if scalar and shape:
        raise _Refused("a scalar extension with a shape")
    if not isinstance(buffer, bytes) or len(buffer) != math.prod(shape) * ITEMSIZE[name]:
        raise _Refused(f"an array whose buffer is not the {shape} {name} values it declares")


def _inner(data: bytes) -> Any:
    """An extension's payload, itself one msgpack object (read raw, as flax reads it)."""
    import msgpack

    try:
        return msgpack.unpackb(data, raw=True, max_str_len=MAX_NAME, max_bin_len=len(data),
                               max_array_len=MAX_DIMS + 3, max_map_len=0, max_ext_len=0)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise _Refused(f"an extension payload that is not msgpack: {type(error).__name__}"
                       f" {error}".rstrip()) from None
