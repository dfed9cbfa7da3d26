"""SARIF 2.1.0 rendering of an audit (GitHub code scanning), located at the lockfile.

Kept beside the audit rather than in `formats/sarif.py`, whose rule table is the scan's; the
level and `security-severity` mapping is the same.
"""

from __future__ import annotations

from typing import Any

from dflash_guard import __version__
from dflash_guard.audit.rules import RULE_FEED, RULES
from dflash_guard.audit.run import AuditReport
from dflash_guard.severity import Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.critical: "error", Severity.high: "error", Severity.medium: "warning",
          Severity.low: "note"}
_SECURITY_SEVERITY = {Severity.critical: "9.5", Severity.high: "8.0", Severity.medium: "5.0",
                      Severity.low: "2.0"}


def _result(rule_id: str, severity: Severity, text: str, lock: str,
            properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "ruleId": rule_id,
        "ruleIndex": list(RULES).index(rule_id),
        "level": _LEVEL[severity],
        "message": {"text": text},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": lock}}}],
        "properties": {"severity": severity.name, **properties},
    }


def render_sarif(report: AuditReport) -> dict[str, Any]:
    """A SARIF log with one run: the three audit rules and one result per finding or refusal."""
    rules = [
        {
            "id": rule_id,
            "name": rule_id.replace("-", ""),
            "shortDescription": {"text": text},
            "properties": {"tags": ["security"]},
        }
        for rule_id, text in RULES.items()
    ]
    results = [
        _result(f.rule_id, f.severity, f"{f.subject}: {f.message}", report.lock,
                {"advisory": f.advisory, "aliases": list(f.aliases),
                 "security-severity": _SECURITY_SEVERITY[f.severity]})
        for f in report.findings
    ]
    results += [
        _result(RULE_FEED, Severity.critical, problem, report.lock,
                {"security-severity": _SECURITY_SEVERITY[Severity.critical]})
        for problem in report.feed_problems
    ]
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "dflash-guard", "version": __version__,
                                      "rules": rules}},
                  "results": results}],
    }
