"""A bounded pre-pass over a GGUF header, run before the `gguf` reader sees the file.

The reader trusts the counts it reads: a 1 KB file claiming 2^62 array elements makes it loop
(and allocate) for ever. This pass walks the same layout (header, key/value pairs, tensor infos)
with plain `struct` reads, checking every count and length against the bytes left in the file
and capping the number of array items, so the reader only ever gets a file whose header fits.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import BinaryIO

MAX_ARRAY_ITEMS = 1 << 23  # far above a real vocabulary (~300k tokens and merges)
MAX_ARRAY_DEPTH = 2  # an array of arrays at most
MAX_TENSOR_DIMS = 4  # GGML_MAX_DIMS
MAX_DIM = (1 << 63) - 1  # llama.cpp keeps dimensions in int64_t
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class LayoutError(ValueError):
    """The header does not fit the file, or a count is beyond what the reader can walk."""


class LimitError(LayoutError):
    """A well-formed header that exceeds this pass's limits (too many array items, too deep)."""


@dataclasses.dataclass
class TensorInfo:
    """One tensor info as the header states it (offset relative to the data section)."""

    name: str
    dims: list[int]
    ggml_type: int
    offset: int


@dataclasses.dataclass
class Layout:
    """What the header says about the data section: its alignment, where it starts, and the
    tensor infos in file order."""

    alignment: int
    data_start: int
    tensors: list[TensorInfo]


class _Cursor:
    def __init__(self, handle: BinaryIO, size: int) -> None:
        self.handle, self.size, self.endian = handle, size, "<"
        self.items = 0

    def left(self) -> int:
        return self.size - self.handle.tell()

    def take(self, count: int, what: str) -> bytes:
        if count > self.left():
            raise LayoutError(f"{what} needs {count} bytes but {self.left()} are left in the file")
        return self.handle.read(count)

    def skip(self, count: int, what: str) -> None:
        if count > self.left():
            raise LayoutError(f"{what} needs {count} bytes but {self.left()} are left in the file")
        self.handle.seek(count, 1)

    def u32(self, what: str) -> int:
        return int(struct.unpack(self.endian + "I", self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(struct.unpack(self.endian + "Q", self.take(8, what))[0])

    def string(self, what: str) -> bytes:
        return self.take(self.u64(f"{what} length"), what)


def check_layout(handle: BinaryIO, size: int) -> Layout:
    """Walk the GGUF header of the `size`-byte file open in `handle`; raise `LayoutError`
    (`LimitError` for a limit) on the first count or length the file cannot hold."""
    cursor = _Cursor(handle, size)
    if cursor.take(4, "magic") != b"GGUF":
        raise LayoutError("no GGUF magic")
    raw_version = cursor.take(4, "version")
    if struct.unpack("<I", raw_version)[0] & 0xFFFF == 0:
        cursor.endian = ">"  # the reader's own test for a big-endian file
    n_tensors = cursor.u64("tensor count")
    n_kv = cursor.u64("key/value count")
    if n_kv * 13 > cursor.left():  # the smallest pair: an empty key, a type and one byte
        raise LayoutError(f"{n_kv} key/value pairs cannot fit in {cursor.left()} bytes")
    alignment = 32  # GGUF_DEFAULT_ALIGNMENT
    for index in range(n_kv):
        key = cursor.string(f"key #{index}")
        kind = cursor.u32(f"type of {key!r}")
        if key == b"general.alignment":
            if kind != 4:  # llama.cpp: a uint32, a non-zero power of two
                raise LayoutError(f"general.alignment has type {kind}, not uint32")
            alignment = cursor.u32("general.alignment")
            if alignment == 0 or alignment & (alignment - 1):
                raise LayoutError(f"general.alignment {alignment} is not a power of two")
            continue
        _value(cursor, kind, repr(key), depth=0)
    if n_tensors * 24 > cursor.left():  # an empty name, no dims, type and offset
        raise LayoutError(f"{n_tensors} tensor infos cannot fit in {cursor.left()} bytes")
    infos: list[TensorInfo] = []
    for index in range(n_tensors):
        name = cursor.string(f"tensor #{index} name")
        dims = cursor.u32(f"dimension count of tensor {name!r}")
        if dims > MAX_TENSOR_DIMS:
            raise LayoutError(f"tensor {name!r} claims {dims} dimensions (GGML allows 4)")
        elements, extents = 1, []
        for axis in range(dims):
            extent = cursor.u64(f"dimension {axis} of tensor {name!r}")
            if extent > MAX_DIM:
                raise LayoutError(f"tensor {name!r} dimension {axis} is {extent} (over int64)")
            elements *= extent
            extents.append(extent)
        # every GGML type stores more than one bit per element: bound the count by the file
        # before anything (the reader's numpy product, a loader's allocation) is sized by it
        if elements > 8 * size:
            raise LayoutError(f"tensor {name!r} claims {elements} elements; the file holds "
                              f"{size} bytes")
        ggml_type = cursor.u32(f"type of tensor {name!r}")
        offset = cursor.u64(f"offset of tensor {name!r}")
        infos.append(TensorInfo(name.decode("utf-8", "replace"), extents, ggml_type, offset))
    start = cursor.handle.tell()
    return Layout(alignment, start + -start % alignment, infos)


def _value(cursor: _Cursor, kind: int, what: str, depth: int) -> None:
    if kind in _SCALAR_BYTES:
        cursor.skip(_SCALAR_BYTES[kind], what)
    elif kind == _STRING:
        cursor.skip(cursor.u64(f"{what} length"), what)
    elif kind == _ARRAY:
        if depth >= MAX_ARRAY_DEPTH:
            raise LimitError(f"{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
        item = cursor.u32(f"{what} item type")
        count = cursor.u64(f"{what} item count")
        least = _SCALAR_BYTES.get(item, 8 if item == _STRING else 12)
        if count * least > cursor.left():
            raise LayoutError(f"{what} claims {count} items; {cursor.left()} bytes are left")
        cursor.items += count
        if cursor.items > MAX_ARRAY_ITEMS:
            raise LimitError(f"over {MAX_ARRAY_ITEMS} array items in the header")
        if item in _SCALAR_BYTES:
            cursor.skip(count * _SCALAR_BYTES[item], what)
        else:
            for _ in range(count):
                _value(cursor, item, what, depth + 1)
    else:
        raise LayoutError(f"{what} has unknown value type {kind}")
