"""Where dflash_guard meets kernels_ref: its `RunnerError` becomes `InputError`, and an
`--inject` name becomes a `Fault`. Torch-free, so the CLI can parse `--inject` cheaply."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dflash_guard.errors import InputError
from kernels_ref.errors import RunnerError
from kernels_ref.faults import Fault


@contextmanager
def runner_errors() -> Iterator[None]:
    """Re-raise kernels_ref's `RunnerError` as `InputError` (one line, exit 2); also a decorator."""
    try:
        yield
    except RunnerError as error:
        raise InputError(str(error)) from None


def parse_fault(name: str | None) -> Fault | None:
    """The `Fault` called `name` (None stays None); `InputError` naming the known faults."""
    if name is None:
        return None
    with runner_errors():
        return Fault.parse(name)
