"""Atomic file writes: a lockfile, report or approval is written whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from dflash_guard.errors import WriteError


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Write `data` to `path` through a temporary file in the same folder and `os.replace`.

    A failure leaves `path` as it was and raises `WriteError` naming it."""
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as error:
        raise WriteError(f"cannot write {target}: {error.strerror or error}") from None
