"""Every command's report goes out through here: `interface` says what a report is (`Report`:
`passed` and `to_json()`; `exit_code`), `json` is the one JSON writer, `sarif` the one SARIF
writer (scan findings and the advisory audit), and `text/` holds one text view per report.

`OutputFormat` (text, json, sarif) is what findings reports offer; `PlainFormat` (text, json)
the others. `renderer(format)` picks a findings report's renderer.
"""

from __future__ import annotations

from enum import StrEnum
from typing import assert_never

from dflash_guard.formats.interface import (
    FindingsReport,
    Renderer,
    Report,
    exit_code,
    verdict_exit,
)


class OutputFormat(StrEnum):
    """Every report format; a command offers the subset it supports."""

    text = "text"
    json = "json"
    sarif = "sarif"


class PlainFormat(StrEnum):
    """`--format` of the reports without findings to put in SARIF: text or JSON."""

    text = OutputFormat.text.value
    json = OutputFormat.json.value


def renderer(output_format: OutputFormat) -> Renderer:
    """The renderer of `output_format` (imported only when chosen)."""
    match output_format:
        case OutputFormat.text:
            from dflash_guard.formats.text import render
        case OutputFormat.json:
            from dflash_guard.formats.json import render
        case OutputFormat.sarif:
            from dflash_guard.formats.sarif import render
        case _:
            assert_never(output_format)
    return render


def render(report: FindingsReport, output_format: OutputFormat) -> str:
    """`report` in `output_format`."""
    return renderer(output_format)(report)


__all__ = ["FindingsReport", "OutputFormat", "PlainFormat", "Renderer", "Report", "exit_code",
           "render", "renderer", "verdict_exit"]
