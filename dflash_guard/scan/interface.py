"""The types every detector shares: findings, rules, severities and the detector protocol."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from dflash_guard.rules import RULES, Rule
from dflash_guard.severity import Severity

__all__ = ["Detector", "Finding", "RemoteCodeFile", "Rule", "Severity"]


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

    def __post_init__(self) -> None:
        if self.rule_id not in RULES:
            raise ValueError(f"{self.rule_id!r} is not a registered scan rule (see scan/rules.py)")

    @classmethod
    def of(
        cls,
        rule: Rule,
        file: str,
        message: str,
        *,
        severity: Severity | None = None,
        line: int | None = None,
        member: str | None = None,
        detector: str = "",
    ) -> Finding:
        """A finding of `rule`, at its default severity unless `severity` says otherwise."""
        return cls(rule.id, severity or rule.severity, file, message, line, member, detector)

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
