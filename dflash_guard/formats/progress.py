"""The two views of `dflash_guard.progress`, both on stderr (stdout carries only the report, so
`--format json` stays parseable); `cli.common.progress` picks one.

`LineProgress`, where stderr is not a terminal (CI logs): a line when a stage starts
(`NAME ...`), one when it ends (`NAME: COUNTS, NOTE (1.2 s)`), and while it advances at most one
line every `EVERY_S` seconds; a stage inside another is indented under it. `BarProgress`, on a
terminal: one transient rich bar per open stage, indented the same way, gone when the stage
ends. Names and notes pass through `terminal_safe` (paths and ids are untrusted). Only the bars
import rich.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from dflash_guard.formats.terminal import terminal_safe
from dflash_guard.progress import BYTES

if TYPE_CHECKING:
    from types import TracebackType

    from rich.console import Console
    from rich.progress import TaskID

EVERY_S = 5.0  # plain lines: at most one progress line this often while a stage advances
INDENT = "  "


@dataclasses.dataclass
class _Stage:
    """One open stage and what it has done so far."""

    name: str
    total: int | None
    unit: str
    done: int = 0
    note: str = ""

    def advance(self, amount: int, note: str) -> None:
        self.done += amount
        self.note = note or self.note

    def summary(self) -> str:
        """`3/12 prompts, NOTE` (sizes for bytes); empty when there is nothing to count."""
        if self.unit == BYTES:
            counts = size_text(self.done) + (
                f"/{size_text(self.total)}" if self.total is not None else "")
        elif self.total is not None:
            counts = f"{self.done}/{self.total} {self.unit}".rstrip()
        else:
            counts = f"{self.done} {self.unit}".rstrip() if self.done else ""
        return ", ".join(part for part in (counts, self.note) if part)


def size_text(count: int) -> str:
    """A byte count as people read it: `512 bytes`, `167.1 kB`, `16.1 GB` (powers of 1000)."""
    if count < 1000:
        return f"{count} bytes"
    value, unit = count / 1000, "kB"
    for larger in ("MB", "GB", "TB"):
        if value < 1000:
            break
        value, unit = value / 1000, larger
    return f"{value:.1f} {unit}"


class LineProgress:
    """Plain, rate-limited lines on a text stream (stderr that is not a terminal)."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic,
                 every_s: float = EVERY_S) -> None:
        self._stream = stream
        self._clock = clock
        self._every_s = every_s
        self._open: list[tuple[_Stage, float]] = []  # with the clock when each started
        self._last_line = -math.inf

    def started(self, name: str, total: int | None = None, unit: str = "") -> None:
        self._open.append((_Stage(name, total, unit), self._clock()))
        self._line(f"{name} ...")

    def advanced(self, amount: int = 1, note: str = "") -> None:
        current, _ = self._open[-1]
        current.advance(amount, note)
        if self._clock() - self._last_line >= self._every_s:
            self._line(f"{current.name}: {current.summary()}")

    def ended(self, interrupted: bool = False) -> None:
        current, started = self._open[-1]
        seconds = self._clock() - started
        outcome = "interrupted" if interrupted else current.summary() or "done"
        self._line(f"{current.name}: {outcome} ({seconds:.1f} s)")
        self._open.pop()

    def _line(self, text: str) -> None:
        self._stream.write(INDENT * (len(self._open) - 1) + terminal_safe(text) + "\n")
        self._stream.flush()
        self._last_line = self._clock()


class BarProgress:
    """Transient rich bars on a terminal console; a context manager (the bars are cleared on
    leaving it, before the report is printed)."""

    def __init__(self, console: Console) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._bars = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                              TextColumn("{task.fields[summary]}", markup=False),
                              TimeElapsedColumn(), console=console, transient=True)
        self._open: list[tuple[_Stage, TaskID]] = []

    def __enter__(self) -> BarProgress:
        self._bars.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._bars.stop()

    def started(self, name: str, total: int | None = None, unit: str = "") -> None:
        description = INDENT * len(self._open) + terminal_safe(name)
        task = self._bars.add_task(description, total=total, summary="")
        self._open.append((_Stage(name, total, unit), task))

    def advanced(self, amount: int = 1, note: str = "") -> None:
        current, task = self._open[-1]
        current.advance(amount, note)
        self._bars.update(task, completed=current.done, summary=terminal_safe(current.summary()))

    def ended(self, interrupted: bool = False) -> None:
        _, task = self._open.pop()
        self._bars.remove_task(task)
