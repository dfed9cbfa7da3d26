"""Matching: engine commits on a real git graph, Hub revisions, PyPI versions; unknown != clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_guard.audit.match import normalise_repo_url
from dflash_guard.audit.run import run_audit
from dflash_guard.rules import ADV_AFFECTED, ADV_UNKNOWN
from dflash_guard.severity import Severity
from dflash_guard.trust.engines import EngineRules, Repository
from tests.support.audit import (
    DRAFTER_COMMIT,
    DRAFTER_REPO,
    ENGINE_URL,
    NOW,
    git_range,
    osv,
    write_feed,
    write_lock,
)
from tests.support.sarif import placed_files


def _audit(tmp_path: Path, engine_commit: str, *records, clone: Path | None = None,
           **lock_options):
    lock = write_lock(tmp_path / "dflash.lock", engine_commit=engine_commit, **lock_options)
    feed = write_feed(tmp_path / "feed.json", *records)
    clones = {"engine": clone} if clone else {}
    return run_audit(lock, [str(feed)], clones=clones, now=NOW)


def _engine_advisory(history, **events):
    return osv("x_TEST-ENGINE-1", [{"ranges": [git_range(ENGINE_URL, **events)]}])


@pytest.mark.parametrize("commit, affected", [
    ("inside", True), ("intro", True), ("fix", False), ("after", False), ("side", False),
    ("root", False),
])
def test_audit_engine_git_range_on_a_real_clone(tmp_path, history, commit, affected):
    advisory = _engine_advisory(history, introduced=history.intro, fixed=history.fix)
    report = _audit(tmp_path, getattr(history, commit), advisory, clone=history.path)
    assert report.ids(ADV_UNKNOWN.id) == []
    assert report.ids(ADV_AFFECTED.id) == (["x_TEST-ENGINE-1"] if affected else [])
    assert report.passed is (not affected)


def test_audit_engine_range_without_clone_is_unknown_not_clean(tmp_path, history):
    advisory = _engine_advisory(history, introduced=history.intro, fixed=history.fix)
    report = _audit(tmp_path, history.inside, advisory)
    [finding] = report.findings
    assert finding.rule_id == ADV_UNKNOWN.id and finding.severity is Severity.high
    assert "--engine-repo" in finding.message
    assert not report.passed


def test_audit_engine_exact_event_commits_decide_without_clone(tmp_path, history):
    advisory = _engine_advisory(history, introduced=history.intro, fixed=history.fix)
    assert _audit(tmp_path, history.intro, advisory).ids(ADV_AFFECTED.id) == ["x_TEST-ENGINE-1"]
    fixed = _audit(tmp_path, history.fix, advisory)
    assert fixed.findings == () and fixed.passed


def test_audit_engine_last_affected_and_limit(tmp_path, history):
    last = _engine_advisory(history, introduced=history.intro, last_affected=history.inside)
    assert _audit(tmp_path, history.inside, last, clone=history.path).ids(ADV_AFFECTED.id)
    assert not _audit(tmp_path, history.fix, last, clone=history.path).findings
    limited = _engine_advisory(history, introduced="0", limit=history.fix)
    assert _audit(tmp_path, history.inside, limited, clone=history.path).ids(ADV_AFFECTED.id)
    assert _audit(tmp_path, history.side, limited, clone=history.path).findings == ()
    assert _audit(tmp_path, history.after, limited, clone=history.path).findings == ()


def test_audit_engine_fix_cherry_picked_on_another_branch(tmp_path, history):
    """Two fixed events (one per branch): a commit after either fix is clean."""
    advisory = _engine_advisory(history, introduced="0", fixed=[history.fix, history.side])
    assert not _audit(tmp_path, history.side, advisory, clone=history.path).findings
    assert _audit(tmp_path, history.root, advisory, clone=history.path).ids(ADV_AFFECTED.id)


def test_audit_engine_commit_missing_from_clone_is_unknown(tmp_path, history):
    advisory = _engine_advisory(history, introduced=history.intro, fixed="f" * 40)
    report = _audit(tmp_path, history.inside, advisory, clone=history.path)
    assert report.ids(ADV_UNKNOWN.id) == ["x_TEST-ENGINE-1"]
    assert "not in the clone" in report.findings[0].message


def test_audit_other_repository_range_does_not_match(tmp_path, history):
    """Once the engine's identity is proven (here: the policy declares its repository), a
    range over another repository is not about it; unproven, it is undecided (Q5)."""
    advisory = osv("x_TEST-OTHER-1", [{"ranges": [git_range(
        "https://github.com/someone-else/engine", introduced="0")]}])
    declared = EngineRules((Repository("github.com/example-org/engine"),))
    lock = write_lock(tmp_path / "dflash.lock", engine_commit=history.inside)
    feed = write_feed(tmp_path / "feed.json", advisory)
    assert run_audit(lock, [str(feed)], now=NOW, engines=declared).findings == ()
    report = run_audit(lock, [str(feed)], now=NOW)
    assert report.ids(ADV_UNKNOWN.id) == ["x_TEST-OTHER-1"]
    assert "identity is not proven" in report.findings[0].message


def test_audit_repo_urls_normalise():
    expected = "github.com/example-org/engine"
    for url in ("https://github.com/Example-Org/engine.git/", "git+https://www.github.com/"
                "example-org/engine", "git@github.com:example-org/engine.git"):
        assert normalise_repo_url(url) == expected


def _drafter_advisory(*versions: str, ranges=None):
    entry = {"package": {"ecosystem": "GIT", "name": f"https://huggingface.co/{DRAFTER_REPO}",
                         "purl": f"pkg:huggingface/{DRAFTER_REPO}"},
             "versions": list(versions)}
    if ranges:
        entry["ranges"] = ranges
    return osv("x_TEST-DRAFTER-1", [entry], severity="CRITICAL")


def test_audit_drafter_revision_listed_in_versions(tmp_path, history):
    report = _audit(tmp_path, history.root, _drafter_advisory(DRAFTER_COMMIT))
    [finding] = report.findings
    assert finding.rule_id == ADV_AFFECTED.id and finding.severity is Severity.critical
    assert finding.subject.startswith(f"drafter {DRAFTER_REPO}@")


def test_audit_drafter_other_revision_is_clean(tmp_path, history):
    assert _audit(tmp_path, history.root, _drafter_advisory("c" * 40)).findings == ()


def test_audit_drafter_git_range_over_hub_repo_uses_its_clone(tmp_path, history):
    ranges = [git_range(f"https://huggingface.co/{DRAFTER_REPO}", introduced=history.intro)]
    lock = write_lock(tmp_path / "dflash.lock", engine_commit=history.root,
                      drafter_commit=history.inside)
    feed = write_feed(tmp_path / "feed.json", _drafter_advisory(ranges=ranges))
    unknown = run_audit(lock, [str(feed)], now=NOW)
    assert unknown.ids(ADV_UNKNOWN.id) == ["x_TEST-DRAFTER-1"]
    decided = run_audit(lock, [str(feed)], clones={DRAFTER_REPO: history.path}, now=NOW)
    assert decided.ids(ADV_AFFECTED.id) == ["x_TEST-DRAFTER-1"]


def _pypi(name: str, *, ranges=None, versions=()):
    entry = {"package": {"ecosystem": "PyPI", "name": name}, "versions": list(versions)}
    if ranges:
        entry["ranges"] = ranges
    return osv("PYSEC-2026-1", [entry], severity=None)


def _ecosystem(**events):
    return [{"type": "ECOSYSTEM", "events": [{k: v} for k, v in events.items()]}]


@pytest.mark.parametrize("version, affected", [
    ("0.9.0", True), ("0.8.0", True), ("0.9.1", False), ("0.10.0", False), ("0.7.9", False),
])
def test_audit_pypi_ecosystem_range(tmp_path, history, version, affected):
    advisory = _pypi("vllm", ranges=_ecosystem(introduced="0.8.0", fixed="0.9.1"))
    report = _audit(tmp_path, history.root, advisory, packages=(("vllm", version),))
    assert report.ids(ADV_AFFECTED.id) == (["PYSEC-2026-1"] if affected else [])
    if affected:  # no severity stated: treated as high, and said so
        assert report.findings[0].severity is Severity.high


def test_audit_pypi_versions_and_name_normalisation(tmp_path, history):
    advisory = _pypi("Flash_Attn", versions=["2.7.0"])
    report = _audit(tmp_path, history.root, advisory, packages=(("flash-attn", "2.7.0"),))
    assert report.ids(ADV_AFFECTED.id) == ["PYSEC-2026-1"]
    other = _audit(tmp_path, history.root, advisory, packages=(("flash-attn", "2.7.1"),))
    assert other.findings == ()


def test_audit_withdrawn_advisory_is_ignored(tmp_path, history):
    advisory = _drafter_advisory(DRAFTER_COMMIT)
    advisory["withdrawn"] = "2026-05-01T00:00:00Z"
    assert _audit(tmp_path, history.root, advisory).findings == ()


def test_audit_fail_on_spares_lower_severities(tmp_path, history):
    lock = write_lock(tmp_path / "dflash.lock", engine_commit=history.root)
    feed = write_feed(tmp_path / "feed.json", osv("x_LOW-1", [{"ranges": [git_range(
        ENGINE_URL, introduced=history.root)]}], severity="LOW"))
    assert not run_audit(lock, [str(feed)], now=NOW).passed
    report = run_audit(lock, [str(feed)], fail_on=Severity.medium, now=NOW)
    assert report.passed and report.ids(ADV_AFFECTED.id) == ["x_LOW-1"]


def test_audit_cli_json_and_sarif(cli, tmp_path, history):
    lock = write_lock(tmp_path / "dflash.lock", engine_commit=history.inside)
    feed = write_feed(tmp_path / "feed.json", _engine_advisory(
        history, introduced=history.intro, fixed=history.fix))
    result = cli("audit", "--lock", lock, "--advisories", feed, "--engine-repo",
                 f"engine={history.path}", "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["summary"]["affected"] == ["x_TEST-ENGINE-1"]
    assert report["feeds"][0]["digest"].startswith("sha256:")
    sarif = cli("audit", "--lock", lock, "--advisories", feed, "--format", "sarif")
    assert sarif.exit_code == 1
    [run] = json.loads(sarif.stdout)["runs"]
    assert [r["ruleId"] for r in run["results"]] == [ADV_UNKNOWN.id]
    text = cli("audit", "--lock", lock, "--advisories", feed, "--engine-repo",
               f"engine={history.path}", "--format", "text")
    assert text.exit_code == 1 and "FAIL" in text.stdout and "x_TEST-ENGINE-1" in text.stdout


def test_audit_sarif_places_its_results_on_the_lockfile(cli, tmp_path, history, monkeypatch):
    lock = write_lock(tmp_path / "dflash.lock", engine_commit=history.inside)
    feed = write_feed(tmp_path / "feed.json", _engine_advisory(
        history, introduced=history.intro, fixed=history.fix))
    monkeypatch.chdir(tmp_path)
    log = json.loads(cli("audit", "--lock", "dflash.lock", "--advisories", feed,
                         "--format", "sarif").stdout)
    [location] = log["runs"][0]["results"][0]["locations"]
    assert location["physicalLocation"]["artifactLocation"] == {"uri": "dflash.lock",
                                                                "uriBaseId": "SRCROOT"}
    assert placed_files(log) == [lock.resolve()]


def test_audit_cli_clean_exits_zero(cli, tmp_path, history):
    lock = write_lock(tmp_path / "dflash.lock", engine_commit=history.after)
    feed = write_feed(tmp_path / "feed.json", _engine_advisory(
        history, introduced=history.intro, fixed=history.fix))
    result = cli("audit", "--lock", lock, "--advisories", feed, "--engine-repo",
                 f"engine={history.path}")
    assert result.exit_code == 0 and "PASS" in result.stdout


def test_audit_cli_engine_repo_errors(cli, tmp_path, history):
    lock = write_lock(tmp_path / "dflash.lock", engine_commit=history.after)
    feed = write_feed(tmp_path / "feed.json", _drafter_advisory(DRAFTER_COMMIT))
    for spec, message in ((f"nope={history.path}", "pins no engine"),
                          (f"engine={tmp_path}", "not a git repository"),
                          ("engine", "expected NAME=PATH")):
        result = cli("audit", "--lock", lock, "--advisories", feed, "--engine-repo", spec)
        assert result.exit_code == 2 and message in result.stderr, result.stderr
    none = cli("audit", "--lock", lock)
    assert none.exit_code == 2 and "no advisory feed" in none.stderr


def test_audit_cli_output_file_is_written_whole(cli, tmp_path, history):
    lock = write_lock(tmp_path / "dflash.lock", engine_commit=history.intro)
    feed = write_feed(tmp_path / "feed.json", _engine_advisory(
        history, introduced=history.intro, fixed=history.fix))
    for fmt, check in (("sarif", lambda t: json.loads(t)["version"] == "2.1.0"),
                       ("text", lambda t: "x_TEST-ENGINE-1" in t and "FAIL" in t)):
        out = tmp_path / f"report.{fmt}"
        result = cli("audit", "--lock", lock, "--advisories", feed, "--format", fmt,
                     "--output", out)
        assert result.exit_code == 1 and result.stdout == "" and check(out.read_text())
