"""Every SARIF log the tool writes (scan, audit, launch --check) passes the OASIS SARIF 2.1.0
schema (vendored in tests/vectors/sarif) and GitHub code scanning's documented ingestion rules
(tests/support/sarif.py): rules with both descriptions, help and a stable security-severity,
percent-encoded uris relative to a declared base, a physical location and fingerprints on
every result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dflash_guard import rules as dg_rules
from tests.support.audit import osv, write_feed, write_lock
from tests.support.sarif import github_problems, placed_files, schema_problems
from tests.support.trust import write_lock as write_pair_lock

SPAWN = "import subprocess\n\n\ndef go():\n    subprocess.run(['id'])\n"


def _valid(log: dict) -> dict:
    assert schema_problems(log) == []
    assert github_problems(log) == []
    return log


def _rules(log: dict) -> dict[str, dict]:
    return {rule["id"]: rule for rule in log["runs"][0]["tool"]["driver"]["rules"]}


def test_the_checks_catch_what_github_refuses():
    """The checks are not vacuous: a log shaped like the old launch --check output fails."""
    log = {"$schema": "x", "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "t", "rules": [
            {"id": "R", "shortDescription": {"text": "r"}}]}},
        "results": [{"ruleId": "R", "ruleIndex": 0, "message": {"text": "m"},
                     "properties": {"security-severity": "8.0"},
                     "locations": [{"logicalLocations": [{"name": "--host"}]}]},
                    {"ruleId": "R", "ruleIndex": 0, "message": {"text": "m"},
                     "locations": [{"physicalLocation": {"artifactLocation": {
                         "uri": "models/dräfter#1/a.py"}}}]}]}]}
    problems = "\n".join(github_problems(log))
    for expected in ("no fullDescription", "no semanticVersion", "security-severity on a result",
                     "no physicalLocation", "not percent-encoded", "no partialFingerprints",
                     "security-severity is not a number"):
        assert expected in problems
    assert schema_problems({"version": "2.1.0", "runs": [{"tool": {}}]})


@pytest.mark.parametrize("folder", ["my drafter", "dräfter#1", "a%20b"])
def test_scan_uris_are_percent_encoded_and_resolve(cli, tmp_path, monkeypatch, builtin_pair,
                                                   folder):
    drafter = tmp_path / "models" / folder
    shutil.copytree(builtin_pair.drafter, drafter)
    (drafter / "dflash.py").write_text(SPAWN)
    monkeypatch.chdir(tmp_path)
    log = _valid(json.loads(cli("scan", "models", "--format", "sarif", "-q").stdout))
    assert placed_files(log) and set(placed_files(log)) == {drafter.resolve() / "dflash.py"}
    [uri] = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
             for r in log["runs"][0]["results"]}
    assert "#" not in uri and " " not in uri and uri.endswith("/dflash.py")


def test_a_folder_outside_the_working_folder_gets_a_declared_base(cli, tmp_path, monkeypatch,
                                                                 builtin_pair):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    log = _valid(json.loads(cli("scan", builtin_pair.drafter, "--format", "sarif",
                                "-q").stdout))
    for result in log["runs"][0]["results"]:
        artifact = result["locations"][0]["physicalLocation"]["artifactLocation"]
        assert artifact["uriBaseId"] == "OUTSIDEROOT" and not artifact["uri"].startswith("file:")
    assert placed_files(log) == [(builtin_pair.drafter / "dflash.py").resolve()]


def test_rule_metadata_is_the_same_in_every_run(cli, tmp_path, monkeypatch, builtin_pair):
    """A rule rates the same whatever else the run found (GitHub re-rates every alert of a
    rule whose security-severity changes between uploads)."""
    monkeypatch.chdir(tmp_path)
    rules = []
    fingerprints = []
    for name, code in (("one", "import subprocess\n"), ("two", SPAWN)):
        shutil.copytree(builtin_pair.drafter, tmp_path / name)
        (tmp_path / name / "dflash.py").write_text(code)
        log = _valid(json.loads(cli("scan", name, "--format", "sarif", "-q").stdout))
        rules.append(_rules(log)["DG-RC-PROCESS"])
        fingerprints.append({json.dumps(r["partialFingerprints"])
                             for r in log["runs"][0]["results"]})
    assert rules[0] == rules[1]
    registered = dg_rules.rule("DG-RC-PROCESS").severity  # the rule's own, not the run's worst
    assert rules[0]["properties"]["security-severity"] == {"critical": "9.5", "high": "8.0"}[
        registered.name]
    again = _valid(json.loads(cli("scan", "two", "--format", "sarif", "-q").stdout))
    assert {json.dumps(r["partialFingerprints"]) for r in again["runs"][0]["results"]} \
        == fingerprints[1]


def test_audit_sarif_rates_its_rules_and_points_at_the_pinning_line(cli, tmp_path,
                                                                    monkeypatch):
    lock = write_lock(tmp_path / "dflash.lock", engine_commit="a" * 40,
                      packages=(("requests", "2.31.0"), ("vllm", "0.9.0")))
    feed = write_feed(tmp_path / "feed.json", osv("x_PYPI-1", [{
        "package": {"ecosystem": "PyPI", "name": "vllm"},
        "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "1.0"}]}]}],
        severity="CRITICAL"))
    monkeypatch.chdir(tmp_path)
    result = cli("audit", "--lock", "dflash.lock", "--advisories", feed, "--format", "sarif")
    assert result.exit_code == 1
    log = _valid(json.loads(result.stdout))
    assert set(_rules(log)) == {"DG-ADV-AFFECTED", "DG-ADV-UNKNOWN", "DG-ADV-FEED"}
    [affected] = [r for r in log["runs"][0]["results"] if r["ruleId"] == "DG-ADV-AFFECTED"]
    assert affected["level"] == "error" and "security-severity" not in affected["properties"]
    line = affected["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert lock.read_text().splitlines()[line - 1].strip() == "- name: vllm"
    assert placed_files(log) == [lock.resolve()] * len(log["runs"][0]["results"])


def test_launch_check_results_sit_on_the_lockfile_and_the_policy(cli, tmp_path, monkeypatch,
                                                                 locked_pair):
    monkeypatch.chdir(tmp_path)
    write_pair_lock(locked_pair.lock, tmp_path / "dflash.lock")
    Path("caps.yaml").write_text("extends: dev\nname: caps\nlaunch:\n"
                                 "  llama.cpp: {ctx_size: 4096}\n")
    result = cli("launch", "--check", "llama.cpp", "--lock", "dflash.lock", "--policy",
                 "caps.yaml", "--format", "sarif", "--",
                 "llama-server", "-m", "model.gguf", "--host", "0.0.0.0")
    assert result.exit_code == 1, result.stderr
    log = _valid(json.loads(result.stdout))
    places = {r["ruleId"]: r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
              for r in log["runs"][0]["results"]}
    assert places["DG-LAUNCH-EXPOSED"] == "dflash.lock"
    assert places["DG-LAUNCH-CAPS"] == "caps.yaml"
    flags = {loc["name"] for r in log["runs"][0]["results"]
             for loc in r["locations"][0].get("logicalLocations", [])}
    assert "--host" in flags
