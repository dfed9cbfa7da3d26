"""JSON rendering: the report's stable JSON form, keys sorted."""

from __future__ import annotations

import json

from dflash_guard.formats.interface import Report


def render(report: Report) -> str:
    """`report.to_json()` as indented JSON with sorted keys."""
    return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"
