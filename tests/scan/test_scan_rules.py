"""The rule registry: the only source of rule ids, SARIF rules and the rule table of
docs/scanning.md."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from dflash_guard import formats
from dflash_guard.findings import Finding
from dflash_guard.formats.sarif import sarif_log
from dflash_guard.rules import RULES, markdown_table, rule
from dflash_guard.scan import ScanReport
from dflash_guard.severity import Severity

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = ROOT / "dflash_guard" / "rules.py"
EMITTERS = [ROOT / "dflash_guard" / room
            for room in ("scan", "templates", "launch", "audit", "formats")]


def test_docs_list_exactly_the_registered_rules() -> None:
    page = (ROOT / "docs" / "scanning.md").read_text()
    table = page.split("<!-- rules:start -->\n", 1)[1].split("<!-- rules:end -->", 1)[0]
    assert table == markdown_table(), "regenerate docs/scanning.md's table: rules.markdown_table()"
    listed = re.findall(r"^\| (DG-[A-Z-]+) \|", table, flags=re.MULTILINE)
    assert listed == list(RULES)


def test_an_unregistered_rule_id_cannot_become_a_finding() -> None:
    with pytest.raises(ValueError, match="DG-MADE-UP"):
        Finding("DG-MADE-UP", Severity.high, "x.bin", "no such rule")
    with pytest.raises(KeyError, match="DG-MADE-UP"):
        rule("DG-MADE-UP")


def test_sarif_refuses_an_unknown_rule_instead_of_rendering_it_as_itself() -> None:
    fake = SimpleNamespace(
        rule_id="DG-MADE-UP", severity=Severity.high, file="x", message="m", line=None, member=None
    )
    with pytest.raises(KeyError, match="DG-MADE-UP"):
        sarif_log([fake])  # type: ignore[list-item]


def test_detectors_emit_through_rule_objects_not_id_literals() -> None:
    literal = re.compile(r"[\"']DG-[A-Z]")
    offenders = [
        path.name
        for path in ROOT.joinpath("dflash_guard").rglob("*.py")
        if path != REGISTRY and literal.search(path.read_text())
    ]
    assert offenders == []


def test_every_registered_rule_is_emitted_somewhere() -> None:
    sources = "".join(p.read_text() for room in EMITTERS for p in sorted(room.rglob("*.py")))
    unused = [
        rule_id
        for rule_id in RULES
        if f"rules.{rule_id.removeprefix('DG-').replace('-', '_')}" not in sources
    ]
    assert unused == []


def test_finding_of_uses_the_default_severity_unless_told() -> None:
    default = Finding.of(RULES["DG-RC-UNREVIEWED"], "m.py", "not reviewed")
    raised = Finding.of(RULES["DG-RC-UNREVIEWED"], "m.py", "x", severity=Severity.high)
    assert (default.rule_id, default.severity, raised.severity) == (
        "DG-RC-UNREVIEWED",
        Severity.low,
        Severity.high,
    )


def _report(*findings: Finding, fail_on: Severity = Severity.medium) -> ScanReport:
    return ScanReport(list(findings), [], [], None, 1, fail_on)


def test_every_format_renders_through_one_mapping() -> None:
    finding = Finding.of(RULES["DG-ST-TRAILING"], "m.safetensors", "8 bytes after the last tensor")
    report = _report(finding, fail_on=Severity.critical)
    assert json.loads(formats.render(report, formats.OutputFormat.json)) == json.loads(
        json.dumps(report.to_json())
    )
    sarif = json.loads(formats.render(report, formats.OutputFormat.sarif))
    (sarif_rule,) = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert sarif_rule["shortDescription"]["text"] == RULES["DG-ST-TRAILING"].description
    text = formats.render(report, formats.OutputFormat.text)
    assert "DG-ST-TRAILING" in text
    assert "PASS: 1 file, 1 finding (worst: high, failing at critical+)" in text
    assert "FAIL:" in formats.render(_report(finding), formats.OutputFormat.text)


def test_severity_parses_names_and_names_the_choices_on_error() -> None:
    assert Severity.names() == ("low", "medium", "high", "critical")
    assert Severity.parse(" High ") is Severity.high
    assert Severity.parse(Severity.low) is Severity.low
    with pytest.raises(ValueError, match="one of low, medium, high, critical"):
        Severity.parse("severe")
