"""Text view of `launch`: the one shell line to run, or the refusal and its reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.launch.run import LaunchReport


def render_launch(report: LaunchReport, console: Console) -> None:
    """The command (variables expanded by the shell that runs it), or `refused: REASON`."""
    if report.command is not None and report.passed:
        console.print(report.command.shell(), highlight=False, markup=False, soft_wrap=True)
    else:
        console.print(f"refused: {report.outcome.reason}", highlight=False, markup=False,
                      soft_wrap=True)
