"""What a finding is: one problem in one file, under a registered rule (`rules`) and a severity."""

from __future__ import annotations

import dataclasses

from dflash_guard.rules import RULES, Rule
from dflash_guard.severity import Severity

__all__ = ["Finding"]


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
    repo: str | None = None  # the Hub repository the finding is about, when not the scanned one

    def __post_init__(self) -> None:
        if self.rule_id not in RULES:
            raise ValueError(f"{self.rule_id!r} is not a registered rule (see rules.py)")

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
        repo: str | None = None,
    ) -> Finding:
        """A finding of `rule`, at its default severity unless `severity` says otherwise."""
        return cls(rule.id, severity or rule.severity, file, message, line, member, detector,
                   repo)

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
            "repo": self.repo,
        }
