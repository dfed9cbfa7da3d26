"""A `Progress` that records what long work reported, for tests of the library's stages."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Recorded:
    """One stage as reported: its name, total and unit, the amounts and notes of its advances,
    its depth (0: outermost) and whether it ended."""

    name: str
    total: int | None
    unit: str
    depth: int
    amounts: list[int] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    ended: bool = False


class Recorder:
    """Every stage in the order started; `open` is the stack of stages not ended yet."""

    def __init__(self) -> None:
        self.stages: list[Recorded] = []
        self.open: list[Recorded] = []

    def started(self, name: str, total: int | None = None, unit: str = "") -> None:
        self.stages.append(Recorded(name, total, unit, len(self.open)))
        self.open.append(self.stages[-1])

    def advanced(self, amount: int = 1, note: str = "") -> None:
        self.open[-1].amounts.append(amount)
        self.open[-1].notes.append(note)

    def ended(self, interrupted: bool = False) -> None:
        self.open.pop().ended = True

    def named(self, name: str) -> Recorded:
        """The one stage called `name`."""
        (found,) = [s for s in self.stages if s.name == name]
        return found
