"""Progress of long work: the library reports it, the CLI shows it.

Long work (hashing, scanning, decoding prompts, sending requests, the gate's checks) takes a
`Progress` and tells it three things: a stage `started` (with its total and unit when known),
`advanced` (units done, with figures so far in `note`), and `ended`. A stage started while
another is open is part of it (the gate's `difftest` check holds the decoding of its prompts).
`stage()` pairs the first and the last. The library draws nothing and never imports the CLI:
the views are in `formats/progress.py`. `NO_PROGRESS`, the default, ignores everything.

Calls come from one thread at a time: work spread over threads reports under a lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

BYTES = "bytes"  # the unit a view shows as a size (kB, MB, GB)


class Progress(Protocol):
    """Where long work reports what it is doing."""

    def started(self, name: str, total: int | None = None, unit: str = "") -> None:
        """A stage begins: `total` units of `unit` to do (None: not known)."""

    def advanced(self, amount: int = 1, note: str = "") -> None:
        """The innermost open stage did `amount` more units; `note`: its figures so far."""

    def ended(self, interrupted: bool = False) -> None:
        """The innermost open stage is over (`interrupted`: stopped by Ctrl-C, not done)."""


class _Silent:
    """A `Progress` that shows nothing."""

    def started(self, name: str, total: int | None = None, unit: str = "") -> None:
        pass

    def advanced(self, amount: int = 1, note: str = "") -> None:
        pass

    def ended(self, interrupted: bool = False) -> None:
        pass


NO_PROGRESS: Progress = _Silent()


@contextmanager
def stage(progress: Progress, name: str, total: int | None = None,
          unit: str = "") -> Iterator[None]:
    """`progress.started(...)` on entry and `progress.ended()` on exit, an exception included
    (a caller that catches it, as the gate does, carries on at the right depth); Ctrl-C ends
    it as interrupted, never as done."""
    progress.started(name, total, unit)
    try:
        yield
    except KeyboardInterrupt:
        progress.ended(interrupted=True)
        raise
    except BaseException:
        progress.ended()
        raise
    progress.ended()
