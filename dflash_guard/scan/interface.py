"""The types every detector shares: severities, findings and the detector protocol."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from pathlib import Path


class Severity(enum.IntEnum):
    """How bad a finding is; ordered so that `low < medium < high < critical`."""

    low = 1
    medium = 2
    high = 3
    critical = 4

    @classmethod
    def parse(cls, text: str) -> Severity:
        """`"High"` -> `Severity.high`; raises `ValueError` naming the accepted values."""
        try:
            return cls[text.strip().lower()]
        except KeyError:
            accepted = ", ".join(member.name for member in cls)
            raise ValueError(f"unknown severity {text!r} (expected one of {accepted})") from None

    def __str__(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem found in one file (or one member of an archive inside it)."""

    rule_id: str
    severity: Severity
    file: str
    message: str
    line: int | None = None
    member: str | None = None
    detector: str = ""

    def to_json(self) -> dict[str, object]:
        """The finding as a JSON object (the README documents the keys)."""
        return {
            "rule_id": self.rule_id,
            "severity": self.severity.name,
            "file": self.file,
            "message": self.message,
            "line": self.line,
            "member": self.member,
            "detector": self.detector,
        }


@dataclasses.dataclass(frozen=True)
class RemoteCodeFile:
    """A Python file a loader could import (`.py` in the folder or an `auto_map` target)."""

    path: str
    sha256: str
    reviewed: bool


# A detector looks at one file and returns its findings, reported under a display name; it never
# raises on malformed input (a file it cannot read is itself a finding).
Detector = Callable[[Path, str], list[Finding]]
