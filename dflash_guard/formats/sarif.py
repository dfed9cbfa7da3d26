"""SARIF 2.1.0 as GitHub code scanning accepts it: the one SARIF writer, for the scan's findings
(`sarif_log`, also `launch --check`'s) and the advisory audit's (`audit_log`).

What GitHub's ingestion needs, and what each log has (checked in tests/formats/test_sarif_github.py
against the OASIS schema and GitHub's documented rules):
- every rule: `shortDescription`, `fullDescription`, `help`, a default level and a
  `security-severity` from the rule's registered severity, so a rule rates the same in every run
  (a result carries its own `level`);
- the driver's `semanticVersion` and `informationUri`;
- every result: a `physicalLocation` (the file it is about: a scanned file, or for a launch flag
  or an advisory the lockfile or policy), a `region` where the finding has a line, and
  `partialFingerprints` from the rule, the file and the message, so an alert keeps its identity
  from one upload to the next;
- every `uri` percent-encoded and relative to a base the run declares in `originalUriBaseIds`:
  `SRCROOT`, the working folder (the repository root in CI), or, for files outside it,
  `OUTSIDEROOT`, the deepest folder holding all of them. Never an absolute `file:` URI.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from dflash_guard import __version__, rules
from dflash_guard.errors import InputError
from dflash_guard.findings import Finding
from dflash_guard.formats.interface import FindingsReport
from dflash_guard.severity import Severity

if TYPE_CHECKING:
    from dflash_guard.audit.run import AuditReport

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/dflash-guard/dflash-guard"
SRCROOT = "SRCROOT"
OUTSIDEROOT = "OUTSIDEROOT"
FINGERPRINT = "dflashGuardFinding/v1"

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


class _Bases:
    """Where each path is, as a percent-encoded `uri` relative to a declared base: `SRCROOT`
    (the working folder) or `OUTSIDEROOT` (the deepest folder holding every other path)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.cwd = Path(os.getcwd())
        outside = [Path(os.path.abspath(p)) for p in paths
                   if not Path(os.path.abspath(p)).is_relative_to(self.cwd)]
        self.outside = (Path(os.path.commonpath([p.parent for p in outside]))
                        if outside else None)

    def declared(self) -> dict[str, dict[str, str]]:
        bases = {SRCROOT: {"uri": _folder_uri(self.cwd)}}
        if self.outside is not None:
            bases[OUTSIDEROOT] = {"uri": _folder_uri(self.outside)}
        return bases

    def location(self, path: str) -> dict[str, str]:
        absolute = Path(os.path.abspath(path))
        if absolute.is_relative_to(self.cwd):
            base, relative = SRCROOT, absolute.relative_to(self.cwd)
        else:
            assert self.outside is not None  # every path was given to __init__
            base, relative = OUTSIDEROOT, absolute.relative_to(self.outside)
        return {"uri": quote(relative.as_posix(), safe="/"), "uriBaseId": base}


def _folder_uri(folder: Path) -> str:
    """`folder` as an absolute, percent-encoded `file:` URI ending in `/` (a SARIF base)."""
    return folder.as_uri().rstrip("/") + "/"


def artifact_location(path: str) -> dict[str, str]:
    """`path` (from the working folder, or absolute) as a SARIF `artifactLocation` of a log
    about that one path."""
    return _Bases([path]).location(path)


def _descriptor(rule: rules.Rule) -> dict[str, Any]:
    """`rule` as a SARIF rule descriptor: its level and security severity are the rule's
    registered severity, the same in every run."""
    return {
        "id": rule.id,
        "name": rule.id.title().replace("-", ""),
        "shortDescription": {"text": rule.description},
        "fullDescription": {"text": f"{rule.description} Reported for: {rule.help}."},
        "help": {"text": f"{rule.description}\n\nReported for: {rule.help}.\n\n"
                         f"See {INFORMATION_URI}/blob/main/docs/scanning.md",
                 "markdown": f"{rule.description}\n\nReported for: {rule.help}.\n\n"
                             f"See [docs/scanning.md]({INFORMATION_URI}/blob/main/docs/"
                             "scanning.md)."},
        "helpUri": f"{INFORMATION_URI}/blob/main/docs/scanning.md",
        "defaultConfiguration": {"level": _LEVEL[rule.severity]},
        "properties": {"tags": ["security"],
                       "security-severity": _SECURITY_SEVERITY[rule.severity]},
    }


def _fingerprint(*parts: str) -> dict[str, str]:
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()
    return {FINGERPRINT: digest[:32]}


def _log(described: list[dict[str, Any]], results: list[dict[str, Any]],
         bases: _Bases) -> dict[str, object]:
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "dflash-guard", "version": __version__,
                               "semanticVersion": __version__,
                               "informationUri": INFORMATION_URI, "rules": described}
                },
                "originalUriBaseIds": bases.declared(),
                "results": results,
            }
        ],
    }


def sarif_log(findings: Iterable[Finding],
              artifact_path: Callable[[Finding], str | None] = lambda f: f.file,
              ) -> dict[str, object]:
    """A SARIF 2.1.0 log with one run, its rules (from the registry) and one result per finding;
    `artifact_path` says where a finding's file is from the working folder (None: the finding's
    own `file`). A finding whose `file` is not its artifact (a flag of a command line) also
    keeps that as a logical location of kind `parameter`.

    Raises `KeyError` for a rule id that is not registered: it never renders as itself.
    """
    findings = list(findings)
    paths = [artifact_path(finding) or finding.file for finding in findings]
    bases = _Bases(paths)
    rule_ids = sorted({finding.rule_id for finding in findings})
    described = [_descriptor(rules.rule(rule_id)) for rule_id in rule_ids]
    results = []
    for finding, path in zip(findings, paths, strict=True):
        artifact = bases.location(path)
        physical: dict[str, object] = {"artifactLocation": artifact}
        if finding.line:
            physical["region"] = {"startLine": finding.line}
        location: dict[str, object] = {"physicalLocation": physical}
        if finding.file.startswith("-"):  # a flag of a command line (launch --check)
            location["logicalLocations"] = [{"name": finding.file, "kind": "parameter"}]
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
                "partialFingerprints": _fingerprint(finding.rule_id, artifact["uri"],
                                                    finding.file, message),
                "properties": {"severity": finding.severity.name, "detector": finding.detector},
            }
        )
    return _log(described, results, bases)


def _line_of(path: str, name: str) -> int | None:
    """The line of the lockfile `path` that names `name` (`name: X` or `repo: X`), or None."""
    from dflash_guard.fileio import read_input_text

    if not name:
        return None
    try:
        text = read_input_text(path, "lockfile")
    except InputError:  # a region is a nicety: the location stands without it
        return None
    wanted = {f"name: {name}", f"repo: {name}"}
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip().removeprefix("- ") in wanted:
            return number
    return None


def audit_log(report: AuditReport) -> dict[str, object]:
    """A SARIF log with one run: the audit rules and one result per finding or refused feed,
    each located at the lockfile, on the line that pins the subject where there is one."""
    ids = [r.id for r in rules.AUDIT_RULES]
    bases = _Bases([report.lock])
    lock = bases.location(report.lock)

    def result(rule_id: str, severity: Severity, text: str, needle: str,
               properties: dict[str, Any]) -> dict[str, Any]:
        physical: dict[str, object] = {"artifactLocation": lock}
        line = _line_of(report.lock, needle)
        if line is not None:
            physical["region"] = {"startLine": line}
        return {
            "ruleId": rule_id,
            "ruleIndex": ids.index(rule_id),
            "level": _LEVEL[severity],
            "message": {"text": text},
            "locations": [{"physicalLocation": physical}],
            "partialFingerprints": _fingerprint(rule_id, lock["uri"], text),
            "properties": {"severity": severity.name, **properties},
        }

    described = [_descriptor(rule) for rule in rules.AUDIT_RULES]
    results = [result(f.rule_id, f.severity, f"{f.advisory}: {f.subject}: {f.message}",
                      _subject_name(f.subject),
                      {"advisory": f.advisory, "aliases": list(f.aliases)})
               for f in report.findings]
    results += [result(rules.ADV_FEED.id, rules.ADV_FEED.severity, problem, "", {})
                for problem in report.feed_problems]
    return _log(described, results, bases)


def _subject_name(subject: str) -> str:
    """The name a lockfile line gives an audit subject (`package requests==2.31.0`, `engine
    vllm@abc...`, `target org/name@rev`)."""
    name = subject.split()[-1]
    for separator in ("==", "@"):
        name = name.split(separator)[0]
    return name
