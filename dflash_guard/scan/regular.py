"""Opening the files a scan reads without ever blocking on them.

A FIFO named `config.json` blocks `open()` until a writer appears, and a character device reads
forever. Every file is opened with `O_NONBLOCK` (a no-op for regular files) and checked with
`fstat` on the open descriptor, so a path swapped for a special file after the folder listing
is refused too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for binary reading; `OSError` when it is not a regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(f"{path.name}: not a regular file (a FIFO, device or socket is not read)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file `path`; `ValueError` when it has over `limit` bytes."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"over the {limit} bytes this kind of file may have")
    return data
