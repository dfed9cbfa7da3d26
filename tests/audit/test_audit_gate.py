"""The policy's `advisories` section and the gate's advisory step (fails closed, records ids)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.pins.lockfile import Engine, write_lockfile
from dflash_guard.severity import Severity
from dflash_guard.trust.policy import builtin_policy_path, load_policy
from dflash_guard.trust.signing import sign_with_key
from tests.support.audit import ENGINE_URL, git_range, osv, write_feed
from tests.support.fixtures import LockedPair
from tests.support.trust import recorded

ENGINE_COMMIT = "ab" * 20
PROMPTS = [{"id": "loop", "prompt": "total = 0\nfor i in range(10):\n    total = total + i * "}]


@pytest.fixture(scope="module")
def engine_locked_pair(locked_pair: LockedPair) -> LockedPair:
    """The locked built-in pair with one engine in its lock, the one the feeds name."""
    engine = Engine("engine", ENGINE_URL, ENGINE_COMMIT, "v1.0")
    return dataclasses.replace(locked_pair,
                               lock=dataclasses.replace(locked_pair.lock, engines=(engine,)))


def _policy(folder: Path, advisories: str) -> Path:
    """The default policy with a one-prompt, 8-token diff test, the fixture drafter's code
    reviewed, the engine's commit pinned as a release (`engines.repositories`), and
    `advisories` appended."""
    from kernels_ref.fixtures import WEIGHTS

    code = hashlib.sha256((WEIGHTS / "dflash.py.txt").read_bytes()).hexdigest()
    (folder / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    text = builtin_policy_path("default").read_text()
    for old, new in (("  prompts: builtin\n  max_new_tokens: 32\n",
                      "  prompts: prompts.jsonl\n  max_new_tokens: 8\n"),
                     ("reviewed_code: []\n", f"reviewed_code:\n  - sha256: {code}\n    path: "
                      "dflash.py\n    reviewer: t@example.com\n    date: 2026-09-01\n"),
                     ("  require_release: false\n", "  require_release: false\n  repositories:\n"
                      f"    - upstream: {ENGINE_URL}\n      releases: {{v1.0.0: {ENGINE_COMMIT}}}\n"
                      )):
        assert old in text
        text = text.replace(old, new, 1)
    path = folder / "policy.yaml"
    path.write_text(text + advisories)
    return path


def _section(feeds: str = "[feed.json]", signers: str = "{identities: [], public_keys: []}",
             allow_unsigned: str = "true", fail_on: str = "high", max_age_days: int = 3650
             ) -> str:
    return (f"advisories:\n  feeds: {feeds}\n  signers: {signers}\n  allow_unsigned: "
            f"{allow_unsigned}\n  fail_on: {fail_on}\n  max_age_days: {max_age_days}\n")


def _engine_record(advisory_id: str, severity: str, modified: dt.datetime | None = None):
    when = modified or dt.datetime.now(dt.UTC).replace(microsecond=0)
    return osv(advisory_id, [{"ranges": [git_range(ENGINE_URL, introduced=ENGINE_COMMIT)]}],
               severity=severity, modified=when)


def _gate(tmp_path: Path, pair: LockedPair, policy: Path, **options):
    lock_path = tmp_path / "dflash.lock"
    write_lockfile(pair.lock, lock_path)
    return run_gate(GateOptions(lock_path, policy, pair.roots, out=tmp_path / "approval.json",
                                **options))


def test_policy_advisories_section_is_read(tmp_path):
    write_feed(tmp_path / "feed.json", _engine_record("x_GATE-1", "LOW"))
    policy = load_policy(_policy(tmp_path, _section(fail_on="critical", max_age_days=7)))
    assert policy.advisories is not None
    assert policy.advisories.feeds == (str(tmp_path / "feed.json"),)
    assert policy.advisories.fail_on is Severity.critical and policy.advisories.max_age_days == 7
    assert load_policy(builtin_policy_path("default")).advisories is None


@pytest.mark.parametrize("section, message", [
    (_section(feeds="[]"), "names no feed"),
    (_section(allow_unsigned="false"), "nothing could pass"),
    (_section(feeds="[missing.json]"), "not found"),
    (_section(feeds="['http://example.com/feed.json']"), "https:// URL"),
    (_section(max_age_days=0), "days > 0"),
    (_section().replace("  fail_on: high\n", ""), "missing required field 'fail_on'"),
])
def test_policy_advisories_section_fails_closed(tmp_path, section, message):
    write_feed(tmp_path / "feed.json", _engine_record("x_GATE-1", "LOW"))
    with pytest.raises(InputError, match=message) as error:
        load_policy(_policy(tmp_path, section))
    assert "policy.yaml:" in str(error.value) and "advisories" in str(error.value)


def test_gate_refuses_stale_feed(tmp_path, engine_locked_pair):
    old = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    write_feed(tmp_path / "feed.json", _engine_record("x_GATE-OLD", "LOW", old))
    result = _gate(tmp_path, engine_locked_pair, _policy(tmp_path, _section(max_age_days=30)))
    assert not result.approved and result.checks[-1].name == "advisories"
    assert all(c.outcome.ok for c in result.checks[:-1])
    assert "stale" in result.reason and "re-check" in result.reason
    assert not (tmp_path / "approval.json").exists()


def test_gate_refuses_affecting_advisory_at_fail_on(tmp_path, engine_locked_pair):
    write_feed(tmp_path / "feed.json", _engine_record("x_GATE-CRIT", "CRITICAL"))
    result = _gate(tmp_path, engine_locked_pair, _policy(tmp_path, _section()))
    assert result.checks[-1].name == "advisories" and "x_GATE-CRIT" in result.reason


def test_gate_refuses_tampered_signed_feed(tmp_path, engine_locked_pair, feed_key_pair):
    feed = write_feed(tmp_path / "feed.json", _engine_record("x_GATE-LOW", "LOW"))
    sign_with_key(feed, feed_key_pair[0])
    feed.write_text(feed.read_text().replace("LOW", "NONE"))
    signers = f"{{identities: [], public_keys: [{feed_key_pair[1].name}]}}"
    policy = _policy(tmp_path, _section(signers=signers, allow_unsigned="false"))
    result = _gate(tmp_path, engine_locked_pair, policy)
    assert result.checks[-1].name == "advisories" and "refused" in result.reason


@pytest.mark.slow
def test_gate_records_feed_digests_and_matched_ids(tmp_path, engine_locked_pair, feed_key_pair):
    feed = write_feed(tmp_path / "feed.json", _engine_record("x_GATE-LOW", "LOW"))
    sign_with_key(feed, feed_key_pair[0])
    signers = f"{{identities: [], public_keys: [{feed_key_pair[1].name}]}}"
    policy = _policy(tmp_path, _section(signers=signers, allow_unsigned="false"))
    result = _gate(tmp_path, engine_locked_pair, policy)
    assert result.approved, result.reason
    [check] = [c for c in result.checks if c.name == "advisories"]
    assert check.outcome.verdict == "passed" and "below it" in check.outcome.reason
    record = recorded(tmp_path / "approval.json", "advisories")
    digest = hashlib.sha256(feed.read_bytes()).hexdigest()
    assert record["feeds"][0]["digest"] == {"sha256": digest}
    assert record["affected"] == ["x_GATE-LOW"] and record["unknown"] == []
    assert record["signers"][0].startswith("key feed-key.pub")


def test_audit_cli_with_policy_section(cli, tmp_path, engine_locked_pair):
    write_feed(tmp_path / "feed.json", _engine_record("x_GATE-MED", "MODERATE"))
    lock_path = tmp_path / "dflash.lock"
    write_lockfile(engine_locked_pair.lock, lock_path)
    high = _policy(tmp_path, _section(fail_on="high"))
    result = cli("audit", "--lock", lock_path, "--policy", high, "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["fail_on"] == "high" and report["summary"]["affected"] == ["x_GATE-MED"]
    low = _policy(tmp_path, _section(fail_on="low"))
    assert cli("audit", "--lock", lock_path, "--policy", low).exit_code == 1
    clash = cli("audit", "--lock", lock_path, "--policy", low, "--fail-on", "critical")
    assert clash.exit_code == 2 and "--fail-on does not apply with --policy" in clash.stderr
    none = cli("audit", "--lock", lock_path, "--policy", "default")
    assert none.exit_code == 2 and "no advisories section" in none.stderr
