"""One typed outcome for every check that can refuse: passed, refused or skipped, with a reason.

A refusal is a result, not an exception (exceptions are for what stops a check from running,
see `errors`): `lock` refusing to pin unsafe inputs, a signature that does not verify and each
step of the deploy gate all return an `Outcome`; the CLI maps a refusal to exit code 1.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum


class Verdict(StrEnum):
    """What a check concluded."""

    passed = "passed"
    refused = "refused"
    skipped = "skipped"  # not configured: it does not block, and the report says why


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A check's verdict and its one-line reason (what passed, why it refused or was skipped)."""

    verdict: Verdict
    reason: str = ""

    @classmethod
    def passed(cls, reason: str = "") -> Outcome:
        return cls(Verdict.passed, reason)

    @classmethod
    def refused(cls, reason: str) -> Outcome:
        return cls(Verdict.refused, reason)

    @classmethod
    def skipped(cls, reason: str) -> Outcome:
        return cls(Verdict.skipped, reason)

    @property
    def ok(self) -> bool:
        """Whether it lets the work go on (passed or skipped)."""
        return self.verdict is not Verdict.refused
