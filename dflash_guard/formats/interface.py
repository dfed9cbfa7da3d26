"""What a renderer needs from a report, and what a renderer is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dflash_guard.scan.interface import Finding


class Report(Protocol):
    """A report any format can render: findings, a JSON form and a one-line summary."""

    @property
    def findings(self) -> Sequence[Finding]:
        """The findings, in the order to show them."""
        ...

    def to_json(self) -> dict[str, object]:
        """The stable JSON form."""
        ...

    def summary(self) -> str:
        """One line: the verdict and the counts."""
        ...


# A renderer turns a report into the text to print or write.
Renderer = Callable[[Report], str]
