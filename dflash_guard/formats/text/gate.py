"""Text view of `gate`: one row per check (those not run too), then the decision."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from dflash_guard.formats.terminal import markup_safe
from dflash_guard.outcome import Verdict

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.gate import GateResult


def render_gate(result: GateResult, console: Console) -> None:
    """The verdict table, then APPROVED (with the record) or REFUSED (with the reason)."""
    table = Table(title="dflash-guard gate", title_justify="left")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for check in result.checks:
        verdict = {Verdict.passed: "[green]pass[/]", Verdict.refused: "[bold red]FAIL[/]",
                   Verdict.skipped: "[dim]not configured[/]"}[check.outcome.verdict]
        table.add_row(check.name, verdict, markup_safe(check.outcome.reason))
    for step in result.not_run:
        table.add_row(step, "[dim]not run[/]", "")
    console.print(table)
    if result.passed:
        where = f": record {markup_safe(str(result.record))}" if result.record else ""
        signed = (f", signed {markup_safe(str(result.signature))}" if result.signature
                  else " (unsigned: verify-approval and monitor --record will not accept it; "
                       "add --key KEY or --sign)" if result.record else "")
        console.print(f"[bold green]APPROVED[/]{where}{signed}", highlight=False)
    else:
        console.print(f"[bold red]REFUSED[/]: {markup_safe(result.reason or '')}",
                      highlight=False, soft_wrap=True)
