"""Bounds on a GGUF's header, checked before the `gguf` reader parses it for the reference diff.

The reader walks every array item into its own numpy view: 3,000,000 one-letter tokens in a
27 MB file cost it 100 s and 4 GB. This pass reads only the counts (plain `struct` reads, no
item kept), checks each against the bytes left in the file and against what the target allows
(its vocabulary for the token arrays, its own merge count for `tokenizer.ggml.merges`, a hard
cap over all), so the reader only ever sees a header a real conversion of this target could
have written.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from dflash_guard.errors import InputError
from dflash_guard.fileio import open_binary

MAX_KEYS = 4096  # key/value pairs (a llama.cpp conversion writes under 100)
MAX_TENSORS = 1 << 16  # tensor infos (the largest published models: a few thousand)
MAX_ITEMS = 1 << 22  # array items over the whole header, whatever the target says
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class TooManyItems(ValueError):
    """An array longer than the target allows: the GGUF is not a conversion of this target."""


class _Cursor:
    """Bounded reads over the open file: every length is checked against the bytes left."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self.handle, self.size, self.endian, self.items = handle, size, "<", 0

    def left(self) -> int:
        return self.size - self.handle.tell()

    def take(self, count: int, what: str) -> bytes:
        if count > self.left():
            raise InputError(f"{what} needs {count} bytes but {self.left()} are left")
        return self.handle.read(count)

    def skip(self, count: int, what: str) -> None:
        if count > self.left():
            raise InputError(f"{what} needs {count} bytes but {self.left()} are left")
        self.handle.seek(count, os.SEEK_CUR)

    def number(self, code: str, what: str) -> int:
        raw = self.take(struct.calcsize(code), what)
        return int(struct.unpack(self.endian + code, raw)[0])


def check_counts(path: Path, allowed: Callable[[str], int]) -> None:
    """Walk `path`'s GGUF header without keeping a value: `InputError` for a header that does
    not fit the file or passes a hard cap, `TooManyItems` for an array with more items than
    `allowed(key)`."""
    try:
        with open_binary(path) as handle:
            _walk(_Cursor(handle, os.fstat(handle.fileno()).st_size), allowed)
    except InputError as error:
        raise InputError(f"cannot read GGUF {path}: {error}") from None
    except OSError as error:
        raise InputError(f"cannot read GGUF {path}: {error.strerror or error}") from None


def _walk(cursor: _Cursor, allowed: Callable[[str], int]) -> None:
    if cursor.take(4, "the magic") != b"GGUF":
        raise InputError("not a GGUF file (no magic)")
    if cursor.number("I", "the version") & 0xFFFF == 0:
        cursor.endian = ">"  # the reader's own test for a big-endian file
    n_tensors, n_keys = cursor.number("Q", "the tensor count"), cursor.number("Q", "the key count")
    if n_keys > MAX_KEYS or n_tensors > MAX_TENSORS:
        raise InputError(f"{n_keys} keys and {n_tensors} tensors: over the limits of "
                         f"{MAX_KEYS} keys and {MAX_TENSORS} tensors")
    for index in range(n_keys):
        raw_key = cursor.take(cursor.number("Q", f"key #{index}'s length"), f"key #{index}")
        key = raw_key.decode("utf-8", "replace")
        _value(cursor, cursor.number("I", f"{key}'s type"), key, allowed(key), top=True)


def _value(cursor: _Cursor, kind: int, key: str, limit: int, *, top: bool) -> None:
    if kind in _SCALAR_BYTES:
        cursor.skip(_SCALAR_BYTES[kind], key)
    elif kind == _STRING:
        cursor.skip(cursor.number("Q", f"a string's length in {key}"), key)
    elif kind == _ARRAY and top:
        item = cursor.number("I", f"{key}'s item type")
        count = cursor.number("Q", f"{key}'s item count")
        if count * _SCALAR_BYTES.get(item, 8) > cursor.left():  # a string: 8 bytes at least
            raise InputError(f"{key} claims {count:,} items; {cursor.left():,} bytes are left")
        if count > limit:
            raise TooManyItems(f"{key} has {count:,} items; the target allows {limit:,}")
        cursor.items += count
        if cursor.items > MAX_ITEMS:
            raise InputError(f"over {MAX_ITEMS:,} array items in the header")
        if item in _SCALAR_BYTES:
            cursor.skip(count * _SCALAR_BYTES[item], key)
        else:
            for _ in range(count):
                _value(cursor, item, key, limit, top=False)
    else:
        raise InputError(f"{key} has value type {kind} (an array of arrays, or unknown)")
