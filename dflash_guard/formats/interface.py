"""What every command's result is to the formats (`Report`), and what a renderer is.

Every reporting command (scan, verify, difftest in each mode, audit, bench, monitor, gate)
returns a `Report`: whether it `passed` (exit 0, else 1: see `exit_code`), its JSON form (one
key style: snake_case, the verdict always `"passed"`) and, where it has them, `findings` a SARIF
log can carry (`FindingsReport`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from dflash_guard.errors import EXIT_FINDING, EXIT_OK

if TYPE_CHECKING:
    from dflash_guard.findings import Finding


class Report(Protocol):
    """A command's result: a verdict and a stable JSON form that carries it as `"passed"`."""

    @property
    def passed(self) -> bool:
        """The verdict: True is exit 0, False exit 1."""
        ...

    def to_json(self) -> dict[str, object]:
        """The stable JSON form: snake_case keys, `"passed"` among them."""
        ...


class FindingsReport(Report, Protocol):
    """A report made of findings (scan, audit): what the text tables and SARIF render."""

    @property
    def findings(self) -> Sequence[Finding]:
        """The findings, in the order to show them."""
        ...

    def summary(self) -> str:
        """One line: the verdict and the counts."""
        ...

    def artifact_path(self, finding: Finding) -> str | None:
        """The path of `finding`'s file from the working folder, or None when it is not a
        file (a flag of a command line)."""
        ...


def exit_code(report: Report) -> int:
    """The exit code of a finished command: 0 when its report passed, 1 when it did not."""
    return verdict_exit(report.passed)


def verdict_exit(passed: bool) -> int:
    """0 for a verdict that passed, 1 for one that did not (a streamed command's, like
    `monitor`'s, which keeps no report of every interval)."""
    return EXIT_OK if passed else EXIT_FINDING


# A renderer turns a report into the text to print or write.
Renderer = Callable[[FindingsReport], str]
