"""Pieces every command shares: output formats, JSON printing, the error-to-exit-code contract."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from dflash_guard.formats import OutputFormat as ReportFormat

if TYPE_CHECKING:
    from rich.console import Console

# Reports go to stdout; progress, warnings and errors to stderr, so `--format json` stays parseable.
# Both consoles are made on first use (see `__getattr__`): a clean scan never imports rich.
# Both escape control characters in every string they print (formats/terminal.py).
stdout: Console
stderr: Console


def __getattr__(name: str) -> Console:
    """`stdout` and `stderr`: rich consoles, made once, when first imported or used."""
    if name not in ("stdout", "stderr"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from dflash_guard.formats.terminal import safe_console

    console = globals()[name] = safe_console(stderr=name == "stderr", soft_wrap=True)
    return console


class OutputFormat(StrEnum):
    """`--format` of the commands that report as text or JSON (see `formats.OutputFormat`)."""

    text = ReportFormat.text.value
    json = ReportFormat.json.value


def print_json(payload: Any) -> None:
    """Print `payload` as stable, sorted JSON on stdout."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
