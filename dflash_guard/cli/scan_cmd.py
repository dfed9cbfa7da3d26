"""`dflash-guard scan`: scan checkpoints and remote code before anything loads them."""

from __future__ import annotations

import io
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from dflash_guard.cli.common import stderr, stdout
from dflash_guard.errors import EXIT_FINDING, EXIT_OK, InputError
from dflash_guard.fileio import write_atomic
from dflash_guard.formats.text import SafeConsole, markup_safe
from dflash_guard.scan import ScanReport, Severity, scan_paths

_STYLE = {
    Severity.critical: "bold red",
    Severity.high: "red",
    Severity.medium: "yellow",
    Severity.low: "dim",
}


class ScanFormat(StrEnum):
    """Report formats of `scan`."""

    text = "text"
    json = "json"
    sarif = "sarif"


class FailOn(StrEnum):
    """Severities accepted by `--fail-on`."""

    low = "low"
    medium = "medium"
    high = "high"
    critical = "critical"


def render_text(report: ScanReport, fail_on: Severity, console: Console) -> None:
    """A table per file, worst findings first, then a one-line verdict."""
    files = sorted({f.file for f in report.findings})
    for file in files:
        table = Table(title=markup_safe(file), title_justify="left", show_lines=False, expand=False)
        table.add_column("severity")
        table.add_column("rule")
        table.add_column("where")
        table.add_column("message", overflow="fold")
        for finding in (f for f in report.findings if f.file == file):
            where = finding.member or ""
            if finding.line:
                where = f"{where} line {finding.line}".strip()
            table.add_row(
                f"[{_STYLE[finding.severity]}]{finding.severity.name}[/]",
                finding.rule_id,
                markup_safe(where),
                markup_safe(finding.message),
            )
        console.print(table)
    worst = report.max_severity
    verdict = "FAIL" if report.fails(fail_on) else "PASS"
    params = f", {report.param_count:,} parameters" if report.param_count is not None else ""
    console.print(
        f"{verdict}: {_count(report.files_scanned, 'file')}, "
        f"{_count(len(report.findings), 'finding')} "
        f"(worst: {worst.name if worst else 'none'}, failing at {fail_on.name}+){params}",
        highlight=False,
    )


def _report_text(report: ScanReport, output_format: ScanFormat, fail_on: Severity) -> str:
    """The report as text (what `render_text` prints), JSON or SARIF."""
    if output_format is ScanFormat.text:
        console = SafeConsole(record=True, width=120, file=io.StringIO())
        render_text(report, fail_on, console)
        return console.export_text()
    payload = report.to_json(fail_on) if output_format is ScanFormat.json else report.to_sarif()
    return json.dumps(payload, indent=2, sort_keys=True) + "\n"


def _count(number: int, noun: str) -> str:
    """`1 finding`, `2 findings`."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def register(app: typer.Typer) -> None:
    """Add `scan` to `app`."""

    @app.command("scan")
    def scan(
        paths: Annotated[list[Path], typer.Argument(help="Files or folders to scan.")],
        target: Annotated[
            Path | None,
            typer.Option("--target", help="Target model folder to check a drafter config against."),
        ] = None,
        output_format: Annotated[
            ScanFormat, typer.Option("--format", help="Report format.")
        ] = ScanFormat.text,
        output: Annotated[
            Path | None,
            typer.Option("--output", help="Write the report to FILE (atomically), not stdout."),
        ] = None,
        fail_on: Annotated[
            FailOn, typer.Option("--fail-on", help="Lowest severity that makes the exit code 1.")
        ] = FailOn.medium,
        reviewed: Annotated[
            list[str] | None,
            typer.Option("--reviewed", help="sha256 of a reviewed code file (repeatable)."),
        ] = None,
        param_budget: Annotated[
            int | None,
            typer.Option("--param-budget", help="Most parameters a drafter may have (3e9)."),
        ] = None,
    ) -> None:
        """Scan checkpoints, chat templates and remote code; exit 1 on findings at --fail-on+."""
        threshold = Severity.parse(fail_on.value)
        report = scan_paths(
            paths,
            target=target,
            reviewed_sha256=frozenset(digest.lower() for digest in reviewed or []),
            param_budget=param_budget,
        )
        if output is None and output_format is ScanFormat.text:
            render_text(report, threshold, stdout)
        elif output is None:
            typer.echo(_report_text(report, output_format, threshold), nl=False)
        else:
            try:
                write_atomic(output, _report_text(report, output_format, threshold))
            except OSError as error:
                reason = error.strerror or error
                raise InputError(f"{output}: cannot write the report ({reason})") from None
            stderr.print(f"report written to {output}", highlight=False)
        raise typer.Exit(EXIT_FINDING if report.fails(threshold) else EXIT_OK)
