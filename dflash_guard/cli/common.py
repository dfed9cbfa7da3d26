"""Pieces every command shares: output formats, JSON printing, the error-to-exit-code contract."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Any

from rich.console import Console

from dflash_guard.formats import OutputFormat as ReportFormat

# Reports go to stdout; progress, warnings and errors to stderr, so `--format json` stays parseable.
stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


class OutputFormat(StrEnum):
    """`--format` of the commands that report as text or JSON (see `formats.OutputFormat`)."""

    text = ReportFormat.text.value
    json = ReportFormat.json.value


def print_json(payload: Any) -> None:
    """Print `payload` as stable, sorted JSON on stdout."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
