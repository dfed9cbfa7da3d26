"""Pieces every command shares: output formats, JSON printing, the error-to-exit-code contract."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Any

from dflash_guard.formats.text import SafeConsole

# Reports go to stdout; progress, warnings and errors to stderr, so `--format json` stays
# parseable. Both escape control characters in every string they print (formats/text.py).
stdout = SafeConsole(soft_wrap=True)
stderr = SafeConsole(stderr=True, soft_wrap=True)


class OutputFormat(StrEnum):
    """Report formats shared by commands that report."""

    text = "text"
    json = "json"


def print_json(payload: Any) -> None:
    """Print `payload` as stable, sorted JSON on stdout."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
