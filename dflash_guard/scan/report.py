"""The result of a scan: findings plus the inventories a policy needs."""

from __future__ import annotations

import dataclasses
from collections import Counter

from dflash_guard import __version__
from dflash_guard.formats.sarif import render_sarif
from dflash_guard.scan.interface import Finding, RemoteCodeFile, Severity

DEFAULT_FAIL_ON = Severity.medium


@dataclasses.dataclass(frozen=True)
class ScanReport:
    """Findings (sorted by file, then worst first) and inventories of one scan."""

    findings: list[Finding]
    remote_code: list[RemoteCodeFile]
    pickle_files: list[str]
    param_count: int | None
    files_scanned: int

    @property
    def max_severity(self) -> Severity | None:
        """The worst severity found, or None when there are no findings."""
        return max((f.severity for f in self.findings), default=None)

    def fails(self, fail_on: Severity = DEFAULT_FAIL_ON) -> bool:
        """Whether any finding is at or above `fail_on`."""
        worst = self.max_severity
        return worst is not None and worst >= fail_on

    def to_json(self, fail_on: Severity = DEFAULT_FAIL_ON) -> dict[str, object]:
        """The stable JSON report (schema in the README, section "Scanning")."""
        counts = Counter(f.severity.name for f in self.findings)
        worst = self.max_severity
        return {
            "tool": "dflash-guard",
            "version": __version__,
            "fail_on": fail_on.name,
            "findings": [f.to_json() for f in self.findings],
            "summary": {
                "files_scanned": self.files_scanned,
                "findings": len(self.findings),
                "by_severity": {s.name: counts.get(s.name, 0) for s in Severity},
                "max_severity": worst.name if worst else None,
                "failed": self.fails(fail_on),
            },
            "remote_code": [dataclasses.asdict(entry) for entry in self.remote_code],
            "pickle_files": list(self.pickle_files),
            "param_count": self.param_count,
        }

    def to_sarif(self) -> dict[str, object]:
        """The findings as a SARIF 2.1.0 log."""
        return render_sarif(self.findings)
