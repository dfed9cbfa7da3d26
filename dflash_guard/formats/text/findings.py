"""Text rendering of a findings report (scan): a table per file, worst findings first, then
the report's one-line summary.
Untrusted strings (file names, messages) are escaped for the terminal (`formats.terminal`).

rich is imported only when there is a finding to tabulate: a clean report is one plain line.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from dflash_guard.formats.interface import FindingsReport
from dflash_guard.formats.terminal import markup_safe, safe_console
from dflash_guard.severity import Severity

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from dflash_guard.scan.interface import Finding

SEVERITY_STYLE = {
    Severity.critical: "bold red",
    Severity.high: "red",
    Severity.medium: "yellow",
    Severity.low: "dim",
}


def print_report(report: FindingsReport, console: Console) -> None:
    """Print `report` on `console` (with colours when the console has them)."""
    for file in sorted({f.file for f in report.findings}):  # rich loads with the first table
        console.print(_file_table(file, [f for f in report.findings if f.file == file]))
    console.print(report.summary(), markup=False, emoji=False, highlight=False)


def _file_table(file: str, findings: list[Finding]) -> Table:
    from rich.table import Table

    table = Table(title=markup_safe(file), title_justify="left", show_lines=False, expand=False)
    table.add_column("severity")
    table.add_column("rule")
    table.add_column("where")
    table.add_column("message", overflow="fold")
    for finding in findings:
        where = finding.member or ""
        if finding.line:
            where = f"{where} line {finding.line}".strip()
        table.add_row(
            f"[{SEVERITY_STYLE[finding.severity]}]{finding.severity.name}[/]",
            finding.rule_id,
            markup_safe(where),
            markup_safe(finding.message),
        )
    return table


def render(report: FindingsReport) -> str:
    """`report` as plain text, tables 120 columns wide (a clean report is its summary line)."""
    if not report.findings:
        return report.summary() + "\n"
    console = safe_console(record=True, width=120, file=io.StringIO())
    print_report(report, console)
    return console.export_text()
