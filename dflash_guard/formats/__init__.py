"""Report formats, chosen in one place: `OutputFormat` -> a renderer from report to string.

One module per format (`text`, `json`, `sarif`); each renderer takes a report (see `interface`)
and returns the text to print or write. Commands that report pick a format here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import assert_never

from dflash_guard.formats.interface import FindingsReport, Renderer, Report, exit_code


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
           "render", "renderer"]
