"""Where dflash_guard meets kernels_ref: its `RunnerError` becomes `InputError`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dflash_guard.errors import InputError
from kernels_ref.errors import RunnerError


@contextmanager
def runner_errors() -> Iterator[None]:
    """Re-raise kernels_ref's `RunnerError` as `InputError` (one line, exit 2); also a decorator."""
    try:
        yield
    except RunnerError as error:
        raise InputError(str(error)) from None
