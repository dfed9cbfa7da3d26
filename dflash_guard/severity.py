"""Severity: how bad a finding is. The one definition used by scan, the CLI and policies."""

from __future__ import annotations

import enum


class Severity(enum.IntEnum):
    """How bad a finding is; ordered so that `low < medium < high < critical`."""

    low = 1
    medium = 2
    high = 3
    critical = 4

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """`("low", "medium", "high", "critical")`, in order."""
        return tuple(member.name for member in cls)

    @classmethod
    def parse(cls, text: str | Severity) -> Severity:
        """`"High"` -> `Severity.high`; raises `ValueError` naming the accepted values.

        A `Severity` is returned as is, so the function also serves as a CLI option parser.
        """
        if isinstance(text, Severity):
            return text
        try:
            return cls[text.strip().lower()]
        except KeyError:
            raise ValueError(
                f"unknown severity {text!r} (expected one of {', '.join(cls.names())})"
            ) from None

    def __str__(self) -> str:
        return self.name
