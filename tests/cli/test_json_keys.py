"""One word per idea in every command's JSON: each reporting command, run with `--format json`,
says its verdict as `"passed": true|false`, exits 0 exactly when it passed (1 when not), and
spells every key in snake_case with none of the retired verdict words (ok, valid, decision,
failed, alarm). The gate's approval record is held to the same keys."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.rollout.test_monitor import SERIES, replaying
from tests.support.audit import git_range, osv, write_feed

RETIRED = {"ok", "valid", "decision", "failed", "alarm", "approved"}
# Names fixed by the formats the record follows (in-toto Statement v1 and its DigestSet).
STANDARD = {"_type", "predicateType", "gitCommit"}
CAMEL = re.compile(r"[a-z][A-Z]")
FAST = '{"id": "code", "prompt": "def mean(data):\\n    "}\n{"id": "one", "prompt": "x"}\n'


@dataclass
class World:
    target: Path
    drafter: Path
    lock: Path
    prompts: Path
    baseline: str
    candidate: str
    metrics: str
    tmp: Path


@pytest.fixture(scope="module")
def world(locked_pair, reference_servers, tmp_path_factory: pytest.TempPathFactory) -> World:
    from dflash_guard.pins.lockfile import write_lockfile

    tmp = tmp_path_factory.mktemp("json-keys")
    write_lockfile(locked_pair.lock, tmp / "dflash.lock")
    (tmp / "fast.jsonl").write_text(FAST)
    write_feed(tmp / "feed.json", osv("x_OTHER-1", [{"ranges": [git_range(
        "https://example.invalid/other", introduced="0")]}]))
    baseline, candidate = reference_servers.urls
    return World(locked_pair.target, locked_pair.drafter, tmp / "dflash.lock", tmp / "fast.jsonl",
                 baseline, candidate, candidate + "/metrics", tmp)


def _commands(w: World) -> dict[str, list[Any]]:
    engine = ["--prompts", w.prompts, "--max-new-tokens", "6"]
    return {
        "scan": ["scan", w.drafter, "--target", w.target],
        "verify": ["verify", "--lock", w.lock, "--root", f"target={w.target}",
                   "--root", f"drafter={w.drafter}"],
        "policy check": ["policy", "check", "dev"],
        "audit": ["audit", "--lock", w.lock, "--advisories", w.tmp / "feed.json"],
        "difftest local": ["difftest", "local", "--target", w.target, "--drafter", w.drafter,
                           *engine],
        "difftest sampled": ["difftest", "sampled", "--target", w.target, "--drafter", w.drafter,
                             "--prompts", w.prompts, "--samples", "20", "--sample-tokens", "1"],
        "difftest endpoint": ["difftest", "endpoint", "--baseline", w.baseline, "--candidate",
                              w.candidate, "--metrics", w.metrics, *engine],
        "difftest reference": ["difftest", "reference", "--target", w.target, "--candidate",
                               w.baseline, "--record", w.tmp / "comparison.json", *engine],
        "difftest isolation": ["difftest", "isolation", "--candidate", w.candidate, *engine],
        "bench": ["bench", "--baseline", w.baseline, "--candidate", w.candidate,
                  "--concurrency", "1", "--requests", "1", "--max-tokens", "4",
                  "--prompts", w.prompts],
        "gate": ["gate", "--lock", w.lock, "--policy", "dev", "--root", f"target={w.target}",
                 "--root", f"drafter={w.drafter}", "--output", w.tmp / "approval.json"],
        "launch": ["launch", "vllm", "--lock", w.lock, "--policy", "dev", "--root",
                   f"target={w.target}", "--root", f"drafter={w.drafter}"],
        "launch refused": ["launch", "vllm", "--lock", w.lock, "--policy", "dev", "--root",
                           f"target={w.target}", "--baseline", "--host", "0.0.0.0"],
    }


def _keys(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, key) of every mapping key in `value`, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield path, key
            yield from _keys(item, f"{path}/{key}")
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item, path)


def _assert_one_style(document: Any) -> None:
    for path, key in _keys(document):
        assert key in STANDARD or not CAMEL.search(key), f"camelCase key {path}/{key}"
        assert key not in RETIRED, f"retired verdict word {path}/{key}"


def _assert_passed_is_the_exit_code(report: dict[str, Any], exit_code: int) -> None:
    assert isinstance(report.get("passed"), bool), sorted(report)
    assert exit_code == (0 if report["passed"] else 1)


@pytest.mark.parametrize("name", ["scan", "verify", "policy check", "audit", "difftest local",
                                  "difftest sampled", "difftest endpoint", "difftest reference",
                                  "difftest isolation", "bench", "gate", "launch",
                                  "launch refused"])
def test_every_report_says_passed_the_same_way(cli, world, name):
    result = cli(*_commands(world)[name], "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    report = json.loads(result.stdout)
    _assert_passed_is_the_exit_code(report, result.exit_code)
    _assert_one_style(report)


def test_failing_reports_say_passed_false_and_exit_1(cli, world, tmp_path):
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    scan = cli("scan", bad, "--format", "json")
    local = cli("difftest", "local", "--target", world.target, "--drafter", world.drafter,
                "--prompts", world.prompts, "--inject", "stale-kv", "--format", "json")
    audit = cli("audit", "--lock", world.lock, "--advisories", tmp_path / "none.json",
                "--format", "json")
    assert audit.exit_code == 2  # a feed it cannot read is an input error, not a report
    for result in (scan, local):
        report = json.loads(result.stdout)
        assert report["passed"] is False
        _assert_passed_is_the_exit_code(report, result.exit_code)


@pytest.mark.parametrize("series", ["healthy", "collapse"])
def test_monitor_lines_say_passed(cli, series):
    with replaying(SERIES[series]) as url:
        result = cli("monitor", "--metrics", url, "--interval", "0", "--once", "--format", "json")
    reading = json.loads(result.stdout)
    _assert_passed_is_the_exit_code(reading, result.exit_code)
    _assert_one_style(reading)


def test_the_records_use_the_same_keys(cli, world):
    """The approval record and the GGUF comparison record (written by the runs above when
    they passed) follow the same style."""
    from dflash_guard.trust.comparison import read_comparison
    from dflash_guard.trust.provenance import read_approval

    approval = world.tmp / "approval.json"
    if not approval.exists():
        cli(*_commands(world)["gate"])
    predicate = read_approval(approval)["predicate"]
    assert predicate["passed"] is True
    _assert_one_style(read_approval(approval))
    comparison = world.tmp / "comparison.json"
    if not comparison.exists():
        cli(*_commands(world)["difftest reference"])
    statement = read_comparison(comparison)
    assert statement.predicate["passed"] is True
    _assert_one_style(statement.predicate)


def test_the_check_sees_a_camel_key_and_a_retired_word():
    with pytest.raises(AssertionError, match="camelCase"):
        _assert_one_style({"a": [{"maxNewTokens": 1}]})
    with pytest.raises(AssertionError, match="retired"):
        _assert_one_style({"summary": {"ok": True}})
    with pytest.raises(AssertionError):
        _assert_passed_is_the_exit_code({"passed": True}, 1)
