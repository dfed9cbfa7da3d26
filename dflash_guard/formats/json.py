"""The one JSON writer: a report's (or any JSON value's) stable form, keys sorted.

A value JSON cannot hold raises `TypeError` here (no `default=str`): a report that puts a path
or an enum into its JSON must say how, not have it stringified behind its back.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from dflash_guard.formats.interface import Report


def dumps(value: Any) -> str:
    """`value` as indented JSON with sorted keys and a final newline."""
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def render(report: Report) -> str:
    """`report.to_json()` as indented JSON with sorted keys."""
    return dumps(report.to_json())


def print_json(value: Any) -> None:
    """Print `value` (a report's JSON form) on stdout and flush."""
    sys.stdout.write(dumps(value))
    sys.stdout.flush()
