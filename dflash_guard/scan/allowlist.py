"""The format allowlist: a file passes only when it is positively identified as a format no
loader unpickles and parses completely as that format.

The runner tries, in order: safetensors (valid header, exact spans, the library's own check),
GGUF (a valid layout), a complete `.npy` array without objects, the binary formats of
`binformats` (numeric `.npz`, sentencepiece models, PNG/JPEG/WebP), JSON, and text (UTF-8 without
control bytes, so no zip record, tar header or binary pickle opcode can hide in it, and not a
pickle to an unpickler). Whatever none of them accepts (an unknown binary, a compressed or
archived stream, a truncated file) is a possible pickle: reported as DG-FORMAT-UNKNOWN (high)
and counted with the pickle files, so a policy with `pickle_allowed: false` refuses it whatever
its name or first bytes.
"""

from __future__ import annotations

import importlib
import math
import os
import re
from pathlib import Path
from typing import IO, Any

from dflash_guard import fileio
from dflash_guard.fileio import open_binary

# Control bytes no text format needs; \t \n \f \r and ESC (terminal colours in logs) are text.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")


def text_problem(path: Path) -> str | None:
    """Why `path` is not plain UTF-8 text, or None when it is."""
    with open_binary(path) as handle:
        data = handle.read(fileio.MAX_TEXT_BYTES + 1)
    if len(data) > fileio.MAX_TEXT_BYTES:
        return f"over {fileio.MAX_TEXT_BYTES} bytes, not read as text"
    if (match := _CONTROL.search(data)) is not None:
        return f"binary: control byte 0x{match.group(0)[0]:02x} at offset {match.start()}"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not UTF-8: {error.reason} at offset {error.start}"
    return None


def npy_header(stream: IO[bytes]) -> tuple[tuple[int, int], tuple[int, ...], Any]:
    """`(version, shape, dtype)` of the `.npy` array whose header starts `stream`, read with
    numpy's own readers (format 1.0, 2.0 and 3.0, whose header is utf-8); leaves `stream` at the
    data. Raises `ValueError` for a header numpy cannot read."""
    import numpy as np

    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, _order, dtype = fmt.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, _order, dtype = fmt.read_array_header_2_0(stream)
        elif version == (3, 0):  # private in numpy 2 (`_format_impl`)
            reader = getattr(fmt, "_read_array_header", None) or importlib.import_module(
                "numpy.lib._format_impl")._read_array_header
            shape, _order, dtype = reader(stream, version)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except Exception as error:  # noqa: BLE001 - numpy raises many types on bad headers
        raise ValueError(f"invalid .npy header: {error}") from None
    return version, shape, dtype


def npy_problem(stream: IO[bytes], size: int) -> str | None:
    """Why the `.npy` array in `stream` (of `size` bytes, read from its start) is not complete
    numeric data, or None: a valid header, no object dtype, exactly the bytes its shape needs."""
    try:
        version, shape, dtype = npy_header(stream)
    except ValueError as error:
        return str(error)
    if version == (3, 0):
        return f".npy version {version} is not checked"
    if dtype.hasobject:
        return "an object array (its data is a pickle)"
    need = math.prod(shape) * dtype.itemsize
    have = size - stream.tell()
    if have != need:
        return f"its shape {tuple(shape)} of {dtype} needs {need} data bytes, the file has {have}"
    return None


def npy_file_problem(path: Path) -> str | None:
    """`npy_problem` of the file at `path`."""
    with open_binary(path) as handle:
        return npy_problem(handle, os.fstat(handle.fileno()).st_size)
