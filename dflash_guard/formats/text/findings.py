"""Text rendering of a findings report (scan, launch --check): one table, a row per finding
(by file, worst first; the file in `where`), then the report's one-line summary. A scan report
lists apart, under their own heading, the files no engine of the deploy loads (with their
findings, which block nothing), and says which engines it was judged against.
Untrusted strings (file names, messages) are escaped for the terminal (`formats.terminal`).

rich is imported only when there is a finding to tabulate: a clean report is one plain line.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from dflash_guard.findings import ScanReport
from dflash_guard.formats.interface import FindingsReport
from dflash_guard.formats.terminal import (
    OFF_TERMINAL_WIDTH,
    markup_safe,
    safe_console,
    terminal_safe,
)
from dflash_guard.severity import Severity

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from dflash_guard.findings import Finding

SEVERITY_STYLE = {
    Severity.critical: "bold red",
    Severity.high: "red",
    Severity.medium: "yellow",
    Severity.low: "dim",
}


def print_report(report: FindingsReport, console: Console) -> None:
    """Print `report` on `console` (with colours when the console has them): one table, a row
    per finding, by file and worst first, the file (member, line) in `where`."""
    findings = sorted(report.findings, key=lambda f: f.file)
    scan = report if isinstance(report, ScanReport) else None
    loaded = [f for f in findings if scan is None or scan.loaded(f)]
    if loaded:  # rich loads with the first table
        console.print(_table(loaded))
    if scan is not None:
        for line in not_loaded_lines(scan):
            console.print(line, markup=False, emoji=False, highlight=False)
    console.print(report.summary(), markup=False, emoji=False, highlight=False)


def not_loaded_lines(report: ScanReport) -> list[str]:
    """The scan's files that no engine of the deploy loads, each with why and its findings
    (none of which blocks), under their heading; then the engines judged against."""
    lines = []
    if report.not_loaded:
        lines.append(f"Not loaded by {' / '.join(report.engines)} (scanned and locked; their "
                     "findings block nothing):")
    for path, why in sorted(report.not_loaded.items()):
        lines.append(f"  {terminal_safe(path)}: {why}")
        lines += [f"    {f.severity.name} {f.rule_id}: {terminal_safe(f.message)}"
                  for f in report.findings if f.file == path]
    lines.append(report.engines_line())
    return lines


def where(finding: Finding) -> str:
    """`FILE`, `FILE[MEMBER]` (inside an archive), then `:LINE` when there is one."""
    shown = f"{finding.file}[{finding.member}]" if finding.member else finding.file
    return f"{shown}:{finding.line}" if finding.line else shown


def _table(findings: list[Finding]) -> Table:
    from rich.table import Table

    table = Table(show_lines=False, expand=False)
    table.add_column("severity", no_wrap=True)
    table.add_column("rule", no_wrap=True)
    table.add_column("where", overflow="fold")
    table.add_column("message", overflow="fold")
    for finding in findings:
        table.add_row(
            f"[{SEVERITY_STYLE[finding.severity]}]{finding.severity.name}[/]",
            finding.rule_id,
            markup_safe(where(finding)),
            markup_safe(finding.message),
        )
    return table


def render(report: FindingsReport) -> str:
    """`report` as plain text for a file, no row wrapped (a clean report is its summary
    line)."""
    if not report.findings and not isinstance(report, ScanReport):
        return report.summary() + "\n"
    if not report.findings:
        assert isinstance(report, ScanReport)
        return "\n".join([*not_loaded_lines(report), report.summary()]) + "\n"
    console = safe_console(record=True, width=OFF_TERMINAL_WIDTH, file=io.StringIO())
    print_report(report, console)
    return console.export_text()
