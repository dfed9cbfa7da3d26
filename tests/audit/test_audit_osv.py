"""OSV parsing: the published schema decides, a malformed record names its file and field."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import dflash_guard.audit
from dflash_guard.audit.author import AdvisorySubject, Events, new_advisory
from dflash_guard.audit.osv import parse_advisories, parse_advisory
from dflash_guard.audit.run import run_audit
from dflash_guard.errors import InputError
from dflash_guard.rules import ADV_AFFECTED
from dflash_guard.severity import Severity
from tests.support.audit import DRAFTER_COMMIT, DRAFTER_REPO, NOW, osv, write_feed, write_lock

PACKAGE = Path(dflash_guard.audit.__file__).parent


def test_osv_schema_is_the_recorded_copy():
    notice = (PACKAGE / "osv-schema.NOTICE").read_text()
    digest = hashlib.sha256((PACKAGE / "osv-schema.json").read_bytes()).hexdigest()
    assert f"sha256:     {digest}" in notice
    assert "Apache License" in (PACKAGE / "osv-schema.LICENSE").read_text()


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r.pop("modified"), "top level"),
    (lambda r: r.update(id="NOPE-1"), "id"),
    (lambda r: r["affected"][0]["ranges"][0]["events"].append({"fixed": "x"}),
     "affected[0].ranges[0].events[1].fixed"),
    (lambda r: r["affected"][0]["ranges"][0].pop("repo"), "affected[0].ranges[0]"),
    (lambda r: r["affected"][0]["ranges"][0]["events"][0].update(fixed="0"),
     "affected[0].ranges[0].events[0]"),
    (lambda r: r.update(modified="yesterday"), "modified"),
])
def test_osv_malformed_record_names_file_and_field(mutate, field):
    record = osv("x_BAD-1", [{"ranges": [{"type": "GIT", "repo": "https://example.com/r",
                                          "events": [{"introduced": "0"}]}]}])
    parse_advisory(json.loads(json.dumps(record)), "feed.json")  # the unmutated one is valid
    mutate(record)
    with pytest.raises(InputError) as error:
        parse_advisory(record, "feed.json")
    assert str(error.value).startswith(f"feed.json: {field}: "), str(error.value)


def test_osv_list_feed_names_the_index():
    good = osv("x_OK-1", [])
    with pytest.raises(InputError, match=r"^f\.json: \[1\]\.id: "):
        parse_advisories([good, {**good, "id": 7}], "f.json")


def test_osv_severity_words():
    assert parse_advisory(osv("GHSA-xxxx-1", [], severity="MODERATE"), "f").severity \
        is Severity.medium
    ubuntu = osv("UBUNTU-1", [], severity=None)
    ubuntu["severity"] = [{"type": "Ubuntu", "score": "low"}]
    assert parse_advisory(ubuntu, "f").severity is Severity.low
    unrated = parse_advisory(osv("PYSEC-1", [], severity=None), "f")
    assert unrated.severity is Severity.high and not unrated.severity_stated


def test_audit_cli_malformed_feed_is_input_error(cli, tmp_path):
    lock = write_lock(tmp_path / "dflash.lock", engine_commit="a" * 40)
    feed = tmp_path / "bad.json"
    record = osv("x_BAD-1", [{"versions": "not-a-list"}])
    write_feed(feed, record)
    result = cli("audit", "--lock", lock, "--advisories", feed)
    assert result.exit_code == 2
    assert f"{feed}: affected[0].versions: " in " ".join(result.stderr.split())
    feed.write_text("{not json")
    result = cli("audit", "--lock", lock, "--advisories", feed)
    assert result.exit_code == 2 and "not valid JSON" in result.stderr


def test_advisory_new_roundtrip_is_matched(cli, tmp_path):
    out = tmp_path / "x.json"
    result = cli("advisory", "new", "--id", "x_ACME-2026-0001", "--summary", "mask id aliases "
                 "a special token", "--hf-repo", DRAFTER_REPO, "--version", DRAFTER_COMMIT,
                 "--severity", "critical", "--output", out)
    assert result.exit_code == 0, result.stderr
    lock = write_lock(tmp_path / "dflash.lock", engine_commit="a" * 40)
    report = run_audit(lock, [str(out)], now=NOW)
    assert report.ids(ADV_AFFECTED.id) == ["x_ACME-2026-0001"]
    assert report.findings[0].severity is Severity.critical
    again = cli("advisory", "new", "--id", "x_ACME-2026-0001", "--summary", "s", "--hf-repo",
                DRAFTER_REPO, "--version", DRAFTER_COMMIT, "--output", out)
    assert again.exit_code == 2 and "--force" in again.stderr


def test_advisory_new_engine_range_and_refusals(cli, tmp_path):
    engine = AdvisorySubject(engine="https://github.com/ggml-org/llama.cpp")
    record = new_advisory("x_ACME-1", engine,
                          summary="s", severity=Severity.high,
                          events=Events(introduced=("a" * 40,), fixed=("b" * 40,)))
    [rng] = record["affected"][0]["ranges"]
    assert rng == {"type": "GIT", "repo": "https://github.com/ggml-org/llama.cpp",
                   "events": [{"introduced": "a" * 40}, {"fixed": "b" * 40}]}
    out = tmp_path / "e.json"
    bad = cli("advisory", "new", "--id", "x_ACME-2", "--summary", "s", "--engine",
              "https://github.com/ggml-org/llama.cpp", "--introduced", "abc123", "--output", out)
    assert bad.exit_code == 2 and "events[0].introduced" in bad.stderr and not out.exists()
    two = cli("advisory", "new", "--id", "x_ACME-3", "--summary", "s", "--engine", "u",
              "--pypi", "vllm", "--version", "1.0", "--output", out)
    assert two.exit_code == 2 and "exactly one subject" in two.stderr
    bad_id = cli("advisory", "new", "--id", "ACME-3", "--summary", "s", "--pypi", "vllm",
                 "--version", "1.0", "--output", out)
    assert bad_id.exit_code == 2 and "x_ for a local database" in bad_id.stderr


def test_docs_example_is_valid_marked_and_never_loaded_by_default():
    repo = PACKAGE.parents[1]
    example = repo / "docs" / "examples" / "osv-advisory.example.json"
    [advisory] = parse_advisories(json.loads(example.read_text()), str(example))
    assert advisory.id.startswith("x_EXAMPLE-") and advisory.summary.startswith("EXAMPLE ONLY")
    for name in ("default", "strict", "dev"):
        assert "advisories:" not in (PACKAGE.parent / "policies" / f"{name}.yaml").read_text()
    shipped = [p for p in PACKAGE.parent.rglob("*.json") if p.name != "osv-schema.json"]
    assert not any("affected" in p.read_text() for p in shipped)
