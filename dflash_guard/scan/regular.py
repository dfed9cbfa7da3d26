"""Kept for the scanner's imports: the one input reader is `dflash_guard.fileio`.

The scanner reports an oversized file as a finding, so `read_regular` here keeps raising
`ValueError` for it (the scanner's "malformed" error), and `OSError` for a special file.
"""

from __future__ import annotations

from pathlib import Path

from dflash_guard import fileio
from dflash_guard.errors import InputError
from dflash_guard.fileio import open_binary as open_regular

__all__ = ["open_regular", "read_regular"]


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file `path`; `ValueError` when it has over `limit` bytes."""
    try:
        return fileio.read_regular(path, limit)
    except fileio.NotRegularFileError:
        raise
    except InputError:
        raise ValueError(f"over the {limit} bytes this kind of file may have") from None
