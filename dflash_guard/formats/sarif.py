"""SARIF 2.1.0 rendering of a report's findings (as GitHub code scanning accepts it)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from dflash_guard import __version__
from dflash_guard.formats.interface import Report
from dflash_guard.scan.interface import Finding
from dflash_guard.scan.rules import rule
from dflash_guard.severity import Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

_LEVEL = {
    Severity.critical: "error",
    Severity.high: "error",
    Severity.medium: "warning",
    Severity.low: "note",
}
_SECURITY_SEVERITY = {
    Severity.critical: "9.5",
    Severity.high: "8.0",
    Severity.medium: "5.0",
    Severity.low: "2.0",
}


def render(report: Report) -> str:
    """`report`'s findings as a SARIF 2.1.0 log (indented JSON, keys sorted)."""
    return json.dumps(sarif_log(report.findings), indent=2, sort_keys=True) + "\n"


def sarif_log(findings: Iterable[Finding]) -> dict[str, object]:
    """A SARIF 2.1.0 log with one run, its rules (from the registry) and one result per finding.

    Raises `KeyError` for a rule id that is not registered: it never renders as itself.
    """
    findings = list(findings)
    worst: dict[str, Severity] = {}
    for finding in findings:
        worst[finding.rule_id] = max(worst.get(finding.rule_id, finding.severity), finding.severity)
    rule_ids = sorted(worst)
    rules = [
        {
            "id": rule_id,
            "name": rule_id.replace("-", ""),
            "shortDescription": {"text": rule(rule_id).description},
            "help": {"text": rule(rule_id).help},
            "defaultConfiguration": {"level": _LEVEL[worst[rule_id]]},
            "properties": {
                "security-severity": _SECURITY_SEVERITY[worst[rule_id]],
                "tags": ["security"],
            },
        }
        for rule_id in rule_ids
    ]
    results = []
    for finding in findings:
        location: dict[str, object] = {"artifactLocation": {"uri": finding.file}}
        if finding.line:
            location["region"] = {"startLine": finding.line}
        message = (
            finding.message
            if not finding.member
            else (f"{finding.message} [member {finding.member}]")
        )
        results.append(
            {
                "ruleId": finding.rule_id,
                "ruleIndex": rule_ids.index(finding.rule_id),
                "level": _LEVEL[finding.severity],
                "message": {"text": message},
                "locations": [{"physicalLocation": location}],
                "properties": {"severity": finding.severity.name, "detector": finding.detector},
            }
        )
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "dflash-guard", "version": __version__, "rules": rules}
                },
                "results": results,
            }
        ],
    }
