"""The one GGUF reader: header, metadata and tensor table, read with bounded reads.

Every count, length and nesting depth is checked against the bytes left in the file and against
the caps below before anything is sized by it, so a 1 KB file claiming 2^62 items costs
nothing. Values are not decoded while walking: a field keeps where its bytes lie, and an array
(3,000,000 one-letter tokens, say) is materialised only when a caller asks for it. What the
walk refuses is what llama.cpp's own reader refuses (`ggml/src/gguf.cpp`, `gguf_init_from_reader`:
version 0, 1 or past 3, an empty or repeated key, an array of arrays, an unknown value type,
`general.alignment` not a uint32 power of two, tensor names of 64 bytes or more, repeated,
over 4 dimensions, negative or overflowing extents, an unknown GGML type, rows that are not
whole blocks); past that, `GGUFLimit` is this reader's cap, not the format's. Big-endian files
are read as gguf-py reads them (llama.cpp on a little-endian host refuses them).

The walk reads the file through a window of WINDOW_BYTES (`os.pread`), values are read when a
caller asks for them, and nothing is mapped: a file another process truncates meanwhile is a
`GGUFError` (it ends before the size it had when opened), where a memory map would kill the
process with SIGBUS. The handle must stay open while values are read.

gguf-py (`gguf.GGUFReader`) reads the same format; the suite holds this reader to it field by
field (tests/scan/test_gguf_reader.py). gguf-py stays the writer. Torch-free, and imports
nothing from dflash_guard, so the scanner, the diff and kernels_ref share it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

MAX_KEYS = 4096  # key/value pairs (a llama.cpp conversion writes under 100)
MAX_TENSORS = 1 << 16  # tensor infos (the largest published models: a few thousand)
MAX_ARRAY_ITEMS = 1 << 22  # array items over the whole header (Llama 3: 408,403 in all)
MAX_STRING_BYTES = 64 * 1024 * 1024  # one string (an embedded tokenizer.json: up to ~33 MB)
MAX_NAME_BYTES = 63  # GGML_MAX_NAME 64, with its NUL
MAX_DIMS = 4  # GGML_MAX_DIMS
VERSIONS = (2, 3)  # llama.cpp: v1 is no longer supported, none past GGUF_VERSION 3
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT
WINDOW_BYTES = 256 * 1024  # what the walk holds of the file at a time

# The GGUF value types (gguf.h `enum gguf_type`) as struct codes; 8 is a string, 9 an array.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}
STRING, ARRAY = 8, 9
_INT64_MAX = (1 << 63) - 1


class GGUFError(ValueError):
    """The file is not a GGUF that llama.cpp's reader accepts (or does not fit its own size)."""


class GGUFLimit(GGUFError):
    """A well-formed header past one of this reader's caps."""


@dataclass(frozen=True)
class Field:
    """One key/value pair: its value type (`item_type` for an array), item count (1 for a
    scalar) and where its value's bytes start and end in the file."""

    key: str
    type: int
    item_type: int | None
    count: int
    start: int
    end: int


@dataclass(frozen=True)
class Tensor:
    """One tensor info: extents as stored (innermost first), GGML type, data offset (relative
    to the data section) and size in bytes."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int

    @property
    def elements(self) -> int:
        count = 1
        for extent in self.dims:
            count *= extent
        return count


class GGUF:
    """A GGUF header read from an open file: `fields` in file order, `tensors`, the alignment
    and where the data section starts. Values are read on demand, from the handle it was
    given; `close()` (or `with`) drops the window."""

    def __init__(self, handle: BinaryIO) -> None:
        self._fd = handle.fileno()
        size = os.fstat(self._fd).st_size
        if size < 24:
            raise GGUFError(f"{size} bytes: shorter than a GGUF header")
        self.size = size
        self._win, self._base = b"", 0  # the bytes held, and where in the file they start
        self._walk()

    def __enter__(self) -> GGUF:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._win = b""

    # -- reading -----------------------------------------------------------------------------

    def _read(self, pos: int, count: int) -> bytes:
        """The file's `count` bytes from `pos` (within its size at open); a file that ends
        sooner was truncated meanwhile: a `GGUFError`."""
        parts, got = [], 0
        while got < count:
            part = os.pread(self._fd, count - got, pos + got)
            if not part:
                raise GGUFError(f"the file ends at byte {pos + got}: it had {self.size} bytes "
                                "when opened (truncated while it was read)")
            parts.append(part)
            got += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _at(self, pos: int, count: int) -> int:
        """Where the file's bytes [pos, pos + count) start in the window, read into it first
        (from `pos`, WINDOW_BYTES or `count` if more) when they are not all there. The caller
        has checked them against the size."""
        at = pos - self._base
        if at < 0 or at + count > len(self._win):
            self._win = self._read(pos, min(max(count, WINDOW_BYTES), self.size - pos))
            self._base, at = pos, 0
        return at

    def _bytes(self, start: int, end: int) -> bytes:
        at = self._at(start, end - start)
        return self._win[at:at + end - start]

    # -- the walk ----------------------------------------------------------------------------

    def _need(self, pos: int, count: int, what: str) -> None:
        if pos + count > self.size:
            left = max(self.size - pos, 0)
            raise GGUFError(f"{what} needs {count} bytes but {left} are left")

    def _number(self, code: str, pos: int, what: str) -> int:
        width = struct.calcsize(code)
        self._need(pos, width, what)
        at = self._at(pos, width)  # first: it may read a new window
        return int(struct.unpack_from(self.order + code, self._win, at)[0])

    def _string_end(self, pos: int, what: str) -> int:
        length = self._number("Q", pos, f"{what}'s length")
        self._need(pos + 8, length, what)
        if length > MAX_STRING_BYTES:
            raise GGUFLimit(f"{what} is {length} bytes, over the {MAX_STRING_BYTES} "
                            "this reader reads")
        return pos + 8 + length

    def _walk(self) -> None:
        buf = self._bytes(0, 24)
        if buf[:4] != b"GGUF":
            raise GGUFError("not a GGUF file (no magic)")
        version = struct.unpack_from("<I", buf, 4)[0]
        self.order = ">" if version & 0xFFFF == 0 else "<"  # gguf-py's test for big-endian
        self.version = struct.unpack_from(self.order + "I", buf, 4)[0]
        if self.version not in VERSIONS:
            raise GGUFError(f"GGUF version {self.version}: llama.cpp reads versions 2 and 3")
        n_tensors, n_keys = struct.unpack_from(self.order + "QQ", buf, 8)
        if n_keys > MAX_KEYS or n_tensors > MAX_TENSORS:
            raise GGUFLimit(f"{n_keys} keys and {n_tensors} tensors: over the limits of "
                            f"{MAX_KEYS} keys and {MAX_TENSORS} tensors")
        pos, self._items = 24, 0
        self.fields: dict[str, Field] = {}
        for index in range(n_keys):
            end = self._string_end(pos, f"key #{index}")
            key = self._bytes(pos + 8, end).decode("utf-8", "surrogateescape")
            if not key:
                raise GGUFError(f"key #{index} is empty")
            if key in self.fields:
                raise GGUFError(f"key {key!r} appears twice")
            self.fields[key] = field = self._field(key, end)
            pos = field.end
        self._nul_keys = any("\0" in key for key in self.fields)  # C strings: `find`
        self.alignment = DEFAULT_ALIGNMENT
        alignment = self.fields.get("general.alignment")
        if alignment is not None:
            if alignment.type != 4:
                raise GGUFError(f"general.alignment has value type {alignment.type}, not uint32")
            self.alignment = self._number("I", alignment.start, "general.alignment")
            if self.alignment == 0 or self.alignment & (self.alignment - 1):
                raise GGUFError(f"general.alignment {self.alignment} is not a power of two")
        self.tensors: list[Tensor] = []
        if n_tensors:
            pos = self._tensor_infos(pos, n_tensors)
        self.data_start = pos + -pos % self.alignment

    def _field(self, key: str, pos: int) -> Field:
        kind = self._number("I", pos, f"{key}'s type")
        pos += 4
        if kind in SCALARS:
            width = struct.calcsize(SCALARS[kind])
            self._need(pos, width, key)
            return Field(key, kind, None, 1, pos, pos + width)
        if kind == STRING:
            return Field(key, kind, None, 1, pos, self._string_end(pos, key))
        if kind != ARRAY:
            raise GGUFError(f"{key} has unknown value type {kind}")
        item = self._number("I", pos, f"{key}'s item type")
        count = self._number("Q", pos + 4, f"{key}'s item count")
        start = pos + 12
        if item == ARRAY:
            raise GGUFError(f"{key} is an array of arrays (llama.cpp reads none)")
        if item not in SCALARS and item != STRING:
            raise GGUFError(f"{key} has unknown item type {item}")
        width = struct.calcsize(SCALARS[item]) if item in SCALARS else 8  # a string: 8 at least
        if count * width > self.size - start:
            raise GGUFError(f"{key} claims {count} items; {max(self.size - start, 0)} "
                            "bytes are left")
        self._items += count
        if self._items > MAX_ARRAY_ITEMS:
            raise GGUFLimit(f"over {MAX_ARRAY_ITEMS} array items in the header (at {key})")
        end = start + count * width if item in SCALARS else self._strings_end(key, start, count)
        return Field(key, ARRAY, item, count, start, end)

    def _strings_end(self, key: str, pos: int, count: int) -> int:
        """Where `count` strings from `pos` end: one bounded length read per string."""
        unpack, last = struct.Struct(self.order + "Q").unpack_from, self.size - 8
        buf, base, top = self._win, self._base, self._base + len(self._win) - 8
        for index in range(count):
            if not base <= pos <= top:  # past the window: the next one starts here
                if pos > last:
                    raise GGUFError(f"{key} item {index} needs 8 bytes; the file has ended")
                self._at(pos, 8)
                buf, base, top = self._win, self._base, self._base + len(self._win) - 8
            (length,) = unpack(buf, pos - base)
            if length > MAX_STRING_BYTES:
                raise GGUFLimit(f"{key} item {index} is {length} bytes, over the "
                                f"{MAX_STRING_BYTES} this reader reads")
            pos += 8 + length
        if pos > self.size:
            raise GGUFError(f"{key}'s strings end at byte {pos}, past the file "
                            f"({self.size} bytes)")
        return pos

    def _tensor_infos(self, pos: int, count: int) -> int:
        from gguf.constants import GGML_QUANT_SIZES  # GGML's block and type sizes

        blocks = {int(kind): sizes for kind, sizes in GGML_QUANT_SIZES.items()}
        if count * 24 > self.size - pos:  # an empty name, no dims, type and offset
            raise GGUFError(f"{count} tensor infos cannot fit in {self.size - pos} bytes")
        seen: set[str] = set()
        for index in range(count):
            end = self._string_end(pos, f"tensor #{index}'s name")
            raw = self._bytes(pos + 8, end)
            name = raw.decode("utf-8", "surrogateescape")
            if len(raw) > MAX_NAME_BYTES:
                raise GGUFError(f"tensor #{index}'s name is {len(raw)} bytes (llama.cpp: "
                                f"under {MAX_NAME_BYTES + 1})")
            if name in seen:
                raise GGUFError(f"tensor {name!r} appears twice")
            seen.add(name)
            n_dims = self._number("I", end, f"{name}'s dimension count")
            if n_dims > MAX_DIMS:
                raise GGUFError(f"tensor {name!r} has {n_dims} dimensions (GGML allows "
                                f"{MAX_DIMS})")
            self._need(end + 4, 8 * n_dims + 12, f"tensor {name!r}'s info")
            at = self._at(end + 4, 8 * n_dims + 12)
            dims = struct.unpack_from(f"{self.order}{n_dims}Q", self._win, at)
            elements = 1
            for axis, extent in enumerate(dims):
                if extent > _INT64_MAX:
                    raise GGUFError(f"tensor {name!r} dimension {axis} is negative as int64")
                elements *= extent
                if elements > _INT64_MAX:
                    raise GGUFError(f"tensor {name!r} {list(dims)} overflows int64 elements")
            pos = end + 4 + 8 * n_dims
            kind, offset = struct.unpack_from(self.order + "IQ", self._win, at + 8 * n_dims)
            pos += 12
            if kind not in blocks:
                raise GGUFError(f"tensor {name!r} has unknown GGML type {kind}")
            block, type_size = blocks[kind]
            if (rows := dims[0] if dims else 1) % block:
                raise GGUFError(f"tensor {name!r}: rows of {rows} are not whole blocks "
                                f"of {block}")
            nbytes = elements // block * type_size
            if nbytes > self.size:  # bounded by the file before anything is sized by it
                raise GGUFError(f"tensor {name!r} claims {elements} elements ({nbytes} bytes); "
                                f"the file holds {self.size} bytes")
            self.tensors.append(Tensor(name, tuple(dims), kind, offset, nbytes))
        return pos

    # -- values ------------------------------------------------------------------------------

    def find(self, key: str) -> Field | None:
        """The field llama.cpp's `gguf_find_key` finds for `key`: the first in file order whose
        key equals it as a C string (up to its first NUL), even where a later key is `key`
        exactly (llama.cpp's reader refuses only byte-identical keys)."""
        first = self.fields.get(key)
        if first is None or self._nul_keys:
            first = next((f for k, f in self.fields.items() if k.split("\0", 1)[0] == key), None)
        return first

    def value(self, key: str) -> int | float | bool | str | None:
        """The scalar or string under `key` (None when absent); `GGUFError` for an array or a
        string that is not UTF-8."""
        field = self.find(key)
        if field is None:
            return None
        if field.type == ARRAY:
            raise GGUFError(f"{key} is an array, not one value")
        if field.type == STRING:
            return _text(self.raw(field)[8:], key)
        result: int | float | bool = struct.unpack_from(self.order + SCALARS[field.type],
                                                        self.raw(field))[0]
        return result

    def array(self, key: str) -> list | None:
        """The items of the array under `key` (None when absent), read now; `GGUFError` for a
        scalar or a string item that is not UTF-8."""
        field = self.find(key)
        if field is None:
            return None
        if field.type != ARRAY or field.item_type is None:
            raise GGUFError(f"{key} is one value, not an array")
        data = self.raw(field)  # the walk bounded it by the file and the caps
        if field.item_type in SCALARS:
            return list(struct.unpack_from(f"{self.order}{field.count}"
                                           f"{SCALARS[field.item_type]}", data))
        unpack, items, pos = struct.Struct(self.order + "Q").unpack_from, [], 0
        for _ in range(field.count):
            (length,) = unpack(data, pos)
            items.append(_text(data[pos + 8:pos + 8 + length], key))
            pos += 8 + length
        return items

    def raw(self, field: Field) -> bytes:
        """The bytes of `field`'s value as stored (after its type, or after the array's item type
        and count)."""
        return self._read(field.start, field.end - field.start)


def _text(raw: bytes, key: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise GGUFError(f"{key} holds a string that is not UTF-8 ({error.reason})") from None


def read_gguf(handle: BinaryIO) -> GGUF:
    """The GGUF header of the regular file open in `handle`, read; `GGUFError` (`GGUFLimit`
    for this reader's caps) for one that llama.cpp's reader refuses or that does not fit."""
    return GGUF(handle)
