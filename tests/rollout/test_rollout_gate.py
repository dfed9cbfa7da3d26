"""The `rollout` policy section: the gate benches the endpoint diff's engines at the expected
concurrency and refuses when speculation is not fast enough there, with the numbers; on approval
the numbers are in the record."""

from __future__ import annotations

import json

import pytest

from dflash_guard.errors import InputError
from dflash_guard.trust.policy import load_policy
from tests.support.trust import recorded, write_lock, write_policy

DIFFTEST = "  near_tie_allowance: 0.0\n"


def rollout_policy(folder, min_speedup: str, endpoints: tuple[str, str] | None = None,
                   rollout: str | None = None):
    replacements = []
    if endpoints is not None:
        lines = [f"baseline: {endpoints[0]}", f"candidate: {endpoints[1]}",
                 "prompts: prompts.jsonl", "max_new_tokens: 8", "metrics: true"]
        replacements.append((DIFFTEST, DIFFTEST + "  endpoints:\n"
                             + "".join(f"    {line}\n" for line in lines)))
    path = write_policy(folder, *replacements)
    section = rollout if rollout is not None else (
        f"rollout:\n  expected_concurrency: 2\n  min_speedup: {min_speedup}\n  requests: 2\n")
    path.write_text(path.read_text() + section)
    return path


@pytest.mark.parametrize(("section", "message"), [
    ("rollout:\n  min_speedup: 1.1\n", "expected_concurrency"),
    ("rollout:\n  expected_concurrency: 0\n  min_speedup: 1.1\n", "an integer > 0"),
    ("rollout:\n  expected_concurrency: 4\n  min_speedup: -1\n", "a number > 0"),
    ("rollout:\n  expected_concurrency: 4\n  min_speedup: 1.1\n  speed: 2\n", "speed"),
])
def test_rollout_section_is_validated(tmp_path, section, message):
    with pytest.raises(InputError, match=message):
        load_policy(rollout_policy(tmp_path, "1", rollout=section))


def test_rollout_section_parses(tmp_path):
    rules = load_policy(rollout_policy(tmp_path, "1.25")).rollout
    assert (rules.expected_concurrency, rules.min_speedup, rules.requests) == (2, 1.25, 2)


def gate(cli, locked_pair, policy, out):
    lock = write_lock(locked_pair.lock, policy.parent / "dflash.lock")
    return cli("gate", "--lock", lock, "--policy", policy, "--root", f"target={locked_pair.target}",
               "--root", f"drafter={locked_pair.drafter}", "--output", out, "--format", "json")


@pytest.mark.slow
def test_gate_approves_and_records_the_speedup(cli, locked_pair, reference_servers, tmp_path):
    out = tmp_path / "approval.json"
    policy = rollout_policy(tmp_path, "0.01", reference_servers.urls)
    result = gate(cli, locked_pair, policy, out)
    assert result.exit_code == 0, result.stdout + result.stderr
    step = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "rollout")
    assert step["verdict"] == "passed"
    measured = recorded(out, "rollout")
    assert measured["expected_concurrency"] == measured["concurrency"] == 2
    assert measured["min_speedup"] == 0.01 and measured["speedup"] > 0.01
    assert measured["baseline"]["requests"] == measured["candidate"]["requests"] == 2
    assert measured["tau"] > 1


@pytest.mark.slow
def test_gate_refuses_with_the_numbers(cli, locked_pair, reference_servers, tmp_path):
    out = tmp_path / "approval.json"
    policy = rollout_policy(tmp_path, "1000", reference_servers.urls)
    result = gate(cli, locked_pair, policy, out)
    assert result.exit_code == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["reason"].startswith("rollout: speedup ")
    assert "at concurrency 2 (baseline " in report["reason"]
    assert "below the policy's min_speedup 1000" in report["reason"]
    assert not out.exists()


@pytest.mark.slow
def test_gate_refuses_a_rollout_section_without_engines(cli, locked_pair, tmp_path):
    out = tmp_path / "approval.json"
    result = gate(cli, locked_pair, rollout_policy(tmp_path, "1.1"), out)
    assert result.exit_code == 1
    assert "rollout: the rollout section needs two engines" in json.loads(result.stdout)["reason"]
