"""What a finding is: one problem in one file, under a registered rule (`rules`) and a severity;
and a scan's report of them (`ScanReport`), which the scan writes and the judge, the review and
the formats read."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from pathlib import PurePosixPath

from dflash_guard import __version__, rules
from dflash_guard.rules import RULES, Rule
from dflash_guard.severity import Severity

__all__ = ["Finding", "RemoteCodeFile", "ScanReport"]


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

DEFAULT_FAIL_ON = Severity.medium
# Findings on reviewed code that still block: what nobody, reviewer included, could parse.
_BLOCKING_WHEN_REVIEWED = frozenset({rules.RC_UNPARSEABLE.id, rules.UNSCANNABLE.id})


@dataclasses.dataclass(frozen=True)
class RemoteCodeFile:
    """A Python file a loader could import (`.py` in the folder or an `auto_map` target)."""

    path: str
    sha256: str
    reviewed: bool


@dataclasses.dataclass(frozen=True)
class ScanReport:
    """Findings (sorted by file, then worst first) and inventories of one scan."""

    findings: list[Finding]
    remote_code: list[RemoteCodeFile]
    pickle_files: list[str]
    param_count: int | None
    files_scanned: int
    fail_on: Severity = DEFAULT_FAIL_ON
    # (shown as, path given): how a finding's `file` maps back to the disk. A folder scanned
    # alone is shown as "" (its files by their path inside it), one of several by its name,
    # a file by the path given.
    roots: tuple[tuple[str, str], ...] = ()
    # What the deploy's engines load (`pins.loaded`): the engines judged against (with no lock,
    # every modelled one: `every_engine`), the files they load, and those none of them opens
    # (path -> why). Findings in a file not loaded are low and block nothing; the inventories
    # above (remote code, pickle files, parameters) count loaded files only.
    engines: tuple[str, ...] = ()
    every_engine: bool = True
    loaded_files: tuple[str, ...] = ()
    not_loaded: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def artifact_path(self, finding: Finding) -> str | None:
        """Where `finding`'s file is, as a path from the working folder (as the scan was
        given it), or None when no scanned root names it."""
        for shown, given in self.roots:
            if not shown:
                return str(PurePosixPath(given, finding.file))
            if finding.file == shown:
                return given
            if finding.file.startswith(f"{shown}/"):
                return str(PurePosixPath(given, finding.file[len(shown) + 1:]))
        return None

    def for_reviewer(self, finding: Finding) -> bool:
        """Whether `finding` is a capability finding of reviewed code (its sha256 is in the
        reviewed set): a person read that code, so the finding stays in the report for them
        and blocks nothing."""
        return (finding.detector == "remote-code"
                and finding.rule_id not in _BLOCKING_WHEN_REVIEWED
                and any(code.reviewed and code.path == finding.file for code in self.remote_code))

    def loaded(self, finding: Finding) -> bool:
        """Whether `finding` is about a file an engine of the deploy may load (not one that
        none of them opens: `not_loaded`)."""
        return finding.file not in self.not_loaded

    def blocking(self, fail_on: Severity | None = None) -> list[Finding]:
        """The findings at or above `fail_on` (by default the report's own) that block: all
        but those on reviewed code (`for_reviewer`) and in files no engine loads."""
        fail_on = fail_on or self.fail_on
        return [f for f in self.findings if f.severity >= fail_on and not self.for_reviewer(f)
                and self.loaded(f)]

    @property
    def max_severity(self) -> Severity | None:
        """The worst severity found, or None when there are no findings."""
        return max((f.severity for f in self.findings), default=None)

    def fails(self, fail_on: Severity | None = None) -> bool:
        """Whether a finding at or above `fail_on` (by default the report's own) blocks."""
        return bool(self.blocking(fail_on))

    @property
    def passed(self) -> bool:
        """No finding at or above the report's `fail_on` (exit 0)."""
        return not self.fails()

    def to_json(self, fail_on: Severity | None = None) -> dict[str, object]:
        """The stable JSON report (schema in the README, section "Scanning")."""
        fail_on = fail_on or self.fail_on
        counts = Counter(f.severity.name for f in self.findings)
        worst = self.max_severity
        return {
            "tool": "dflash-guard",
            "version": __version__,
            "fail_on": fail_on.name,
            "passed": not self.fails(fail_on),
            "findings": [f.to_json() for f in self.findings],
            "summary": {
                "files_scanned": self.files_scanned,
                "findings": len(self.findings),
                "by_severity": {s.name: counts.get(s.name, 0) for s in Severity},
                "max_severity": worst.name if worst else None,
                "reviewed_code_findings": sum(map(self.for_reviewer, self.findings)),
                "not_loaded_findings": sum(not self.loaded(f) for f in self.findings),
            },
            "remote_code": [dataclasses.asdict(entry) for entry in self.remote_code],
            "pickle_files": list(self.pickle_files),
            "param_count": self.param_count,
            **self.loading_json(),
        }

    def loading_json(self) -> dict[str, object]:
        """The engines judged against and the files they load and do not load."""
        return {
            "engines": list(self.engines),
            "every_engine": self.every_engine,
            "loaded_files": list(self.loaded_files),
            "not_loaded_files": [{"path": path, "reason": why}
                                 for path, why in sorted(self.not_loaded.items())],
        }

    def record_section(self, fail_on: Severity | None = None) -> dict[str, object]:
        """This scan's part of the approval record: the counts of `to_json`'s summary, the
        parameter count, and the loaded and not-loaded files with the engines judged against
        (the findings themselves stay in the scan's own report)."""
        summary = self.to_json(fail_on)["summary"]
        assert isinstance(summary, dict)
        return {**summary, "param_count": self.param_count, **self.loading_json()}

    def summary(self) -> str:
        """One line: the verdict, counts, worst severity and the threshold."""
        worst = self.max_severity
        verdict = "FAIL" if self.fails() else "PASS"
        params = f", {self.param_count:,} parameters" if self.param_count is not None else ""
        aside = f", {len(self.not_loaded)} not loaded" if self.not_loaded else ""
        return (
            f"{verdict}: {_count(self.files_scanned, 'file')}{aside}, "
            f"{_count(len(self.findings), 'finding')} "
            f"(worst: {worst.name if worst else 'none'}, failing at {self.fail_on.name}+){params}"
        )

    def engines_line(self) -> str:
        """Which engines decided what is loaded, and how they were chosen."""
        names = " / ".join(self.engines)
        if self.every_engine:
            return (f"Judged against every engine dflash-guard models ({names}): no lock names "
                    "this deploy's engines (scan --lock LOCK names them).")
        return f"Judged against the lock's engines: {names}."


def _count(number: int, noun: str) -> str:
    """`1 finding`, `2 findings`."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
