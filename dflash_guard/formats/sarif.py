"""SARIF 2.1.0 (as GitHub code scanning accepts it): the one SARIF writer, for the scan's
findings (`sarif_log`) and the advisory audit's (`audit_log`, located at the lockfile).

A file is located by a URI relative to `SRCROOT`, the working folder (the repository root in
CI), which `run.originalUriBaseIds` defines as an absolute `file:` URI (SARIF 2.1.0 §3.14.14),
so code scanning places `models/drafter/dflash.py` where it is, whichever folder was scanned.
A file outside the working folder gets its absolute `file:` URI (nothing in the repository to
place it on). A finding about a flag of a command line (`launch --check`) has no file: it is
a logical location of kind `parameter`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflash_guard import __version__, rules
from dflash_guard.findings import Finding
from dflash_guard.formats.interface import FindingsReport
from dflash_guard.severity import Severity

if TYPE_CHECKING:
    from dflash_guard.audit.run import AuditReport

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "SRCROOT"

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


def render(report: FindingsReport) -> str:
    """`report`'s findings (a scan's) as a SARIF 2.1.0 log (indented JSON, keys sorted)."""
    return json.dumps(sarif_log(report.findings, report.artifact_path), indent=2,
                      sort_keys=True) + "\n"


def render_audit(report: AuditReport) -> str:
    """An advisory audit as a SARIF 2.1.0 log (indented JSON, keys sorted)."""
    return json.dumps(audit_log(report), indent=2, sort_keys=True) + "\n"


def _log(described: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, object]:
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "dflash-guard", "version": __version__,
                               "rules": described}
                },
                "originalUriBaseIds": {SRCROOT: {"uri": _working_folder_uri()}},
                "results": results,
            }
        ],
    }


def _working_folder_uri() -> str:
    """The working folder as an absolute `file:` URI ending in `/` (as SARIF wants a base)."""
    return Path.cwd().resolve().as_uri().rstrip("/") + "/"


def artifact_location(path: str) -> dict[str, str]:
    """`path` (from the working folder, or absolute) as a SARIF `artifactLocation`: relative to
    `SRCROOT` when it is inside the working folder, else its absolute `file:` URI."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path.cwd().resolve())
    except ValueError:
        return {"uri": absolute.as_uri()}
    return {"uri": relative.as_posix(), "uriBaseId": SRCROOT}


def _descriptor(rule: rules.Rule, worst: Severity | None = None) -> dict[str, Any]:
    """`rule` as a SARIF rule descriptor; with `worst`, the level and security severity its
    findings reached (the audit's carry the advisory's severity on each result instead)."""
    properties: dict[str, object] = {"tags": ["security"]}
    descriptor: dict[str, Any] = {"id": rule.id, "name": rule.id.replace("-", ""),
                                  "shortDescription": {"text": rule.description},
                                  "help": {"text": rule.help}, "properties": properties}
    if worst is not None:
        descriptor["defaultConfiguration"] = {"level": _LEVEL[worst]}
        properties["security-severity"] = _SECURITY_SEVERITY[worst]
    return descriptor


def sarif_log(findings: Iterable[Finding],
              artifact_path: Callable[[Finding], str | None] = lambda f: f.file,
              ) -> dict[str, object]:
    """A SARIF 2.1.0 log with one run, its rules (from the registry) and one result per finding;
    `artifact_path` says where a finding's file is from the working folder (None: not a file).

    Raises `KeyError` for a rule id that is not registered: it never renders as itself.
    """
    findings = list(findings)
    worst: dict[str, Severity] = {}
    for finding in findings:
        worst[finding.rule_id] = max(worst.get(finding.rule_id, finding.severity), finding.severity)
    rule_ids = sorted(worst)
    described = [_descriptor(rules.rule(rule_id), worst[rule_id]) for rule_id in rule_ids]
    results = []
    for finding in findings:
        path = artifact_path(finding)
        if path is None:
            location: dict[str, object] = {
                "logicalLocations": [{"name": finding.file, "kind": "parameter"}]}
        else:
            physical: dict[str, object] = {"artifactLocation": artifact_location(path)}
            if finding.line:
                physical["region"] = {"startLine": finding.line}
            location = {"physicalLocation": physical}
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
                "locations": [location],
                "properties": {"severity": finding.severity.name, "detector": finding.detector},
            }
        )
    return _log(described, results)


def audit_log(report: AuditReport) -> dict[str, object]:
    """A SARIF log with one run: the audit rules and one result per finding or refused feed,
    each located at the lockfile."""
    ids = [r.id for r in rules.AUDIT_RULES]
    lock = artifact_location(report.lock)

    def result(rule_id: str, severity: Severity, text: str,
               properties: dict[str, Any]) -> dict[str, Any]:
        return {
            "ruleId": rule_id,
            "ruleIndex": ids.index(rule_id),
            "level": _LEVEL[severity],
            "message": {"text": text},
            "locations": [{"physicalLocation": {"artifactLocation": lock}}],
            "properties": {"severity": severity.name,
                           "security-severity": _SECURITY_SEVERITY[severity], **properties},
        }

    described = [_descriptor(rule) for rule in rules.AUDIT_RULES]
    results = [result(f.rule_id, f.severity, f"{f.subject}: {f.message}",
                      {"advisory": f.advisory, "aliases": list(f.aliases)})
               for f in report.findings]
    results += [result(rules.ADV_FEED.id, rules.ADV_FEED.severity, problem, {})
                for problem in report.feed_problems]
    return _log(described, results)
