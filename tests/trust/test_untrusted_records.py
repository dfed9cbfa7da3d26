"""Issue 45 item 6 (Q14 and beyond): a malformed approval record ends `verify-approval` and
`monitor --record` in one readable line (exit 2), never a traceback: wrong types, digests that
are not hex, numbers out of range (NaN, 1e400, a 5000-digit integer, a tau of a million), a
record nested past the parser's depth. The record needs no valid signature to get there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_guard.gate.record import policy_descriptor
from dflash_guard.trust.closure import policy_closure
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.provenance import PREDICATE_TYPE

HEX = "a" * 64


def valid_record(policy: str = "default") -> dict:
    loaded = load_policy(policy)
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "predicateType": PREDICATE_TYPE,
        "subject": [{"name": "dflash.lock", "digest": {"sha256": HEX}}],
        "predicate": {
            "passed": True, "approved_at": "2026-12-06T03:00:00Z",
            "policy": policy_descriptor(loaded, policy_closure(loaded)),
            "lockfile": {"name": "dflash.lock", "content_digest": f"sha256:{HEX}"},
            "checks": [{"name": "difftest", "verdict": "passed", "reason": "",
                        "evidence": {"acceptance_length": 3.5}}],
            "waivers": [],
        },
    }


def _set(document: dict, dotted: str, value: object) -> dict:
    *parents, last = dotted.split(".")
    here = document
    for part in parents:
        here = here[int(part)] if isinstance(here, list) else here[part]
    if isinstance(here, list):
        here[int(last)] = value
    else:
        here[last] = value
    return document


# (field, bad value, what the one line names)
MALFORMED = [
    ("predicate.lockfile", "dflash.lock", "predicate.lockfile"),  # Q14
    ("predicate.policy.digest", HEX, "predicate.policy.digest"),  # Q14
    ("predicate.policy", [], "predicate.policy"),
    ("predicate.policy.digest.sha256", "sha256:" + HEX, "predicate.policy.digest.sha256"),
    ("predicate.policy.closure.files", {"a": 1}, "predicate.policy.closure.files"),
    ("predicate.lockfile.content_digest", 7, "predicate.lockfile.content_digest"),
    ("predicate.checks", {"difftest": 1}, "predicate.checks"),
    ("predicate.checks.0", "difftest", "predicate.checks[0]"),
    ("predicate.checks.0.evidence", [3.5], "predicate.checks[0].evidence"),
    ("predicate.checks.0.evidence.acceptance_length", "3.5", "acceptance_length"),
    ("predicate.checks.0.evidence.acceptance_length", True, "acceptance_length"),
    ("predicate.checks.0.evidence.acceptance_length", 0.5, "acceptance_length"),
    ("predicate.checks.0.evidence.acceptance_length", 10**6, "acceptance_length"),
    ("predicate.approved_at", "yesterday", "predicate.approved_at"),
    ("predicate.waivers", [{"id": 1}], "predicate.waivers[0]"),
    ("subject", [], "subject"),
    ("subject.0.digest", "sha256:" + HEX, "subject[0].digest"),
    ("subject.0.name", 12, "subject[0].name"),
    ("predicate", "approved", "predicate"),
]
RAW = [  # texts no JSON encoder writes, but a file can hold
    ('"acceptance_length": 3.5', '"acceptance_length": NaN', "not valid JSON"),
    ('"acceptance_length": 3.5', '"acceptance_length": 1e400', "not valid JSON"),
    ('"acceptance_length": 3.5', '"acceptance_length": Infinity', "not valid JSON"),
    ('"acceptance_length": 3.5', '"acceptance_length": ' + "9" * 5000, "not valid JSON"),
    ('"waivers": []', '"waivers": ' + "[" * 100_000 + "]" * 100_000, "not valid JSON"),
]


def _cases() -> list[tuple[str, bytes, str]]:
    cases = []
    for field, value, named in MALFORMED:
        data = json.dumps(_set(valid_record(), field, value)).encode()
        cases.append((f"{field}={str(value)[:12]}", data, named))
    text = json.dumps(valid_record())
    for old, new, named in RAW:
        assert old in text
        cases.append((new[:30], text.replace(old, new).encode(), named))
    return cases


CASES = _cases()


def _one_line_exit_2(result, named: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "internal error" not in result.stderr
    assert named in lines[0], lines[0]


@pytest.mark.parametrize(("data", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_verify_approval_malformed_record_is_one_line(cli, tmp_path, data, named):
    record = tmp_path / "approval.json"
    record.write_bytes(data)
    _one_line_exit_2(cli("verify-approval", record, "--signature-only"), named)


@pytest.mark.parametrize(("data", "named"), [c[1:] for c in CASES[:2] + CASES[9:14]],
                         ids=[c[0] for c in CASES[:2] + CASES[9:14]])
def test_monitor_record_malformed_is_one_line(cli, tmp_path, data, named):
    record = tmp_path / "approval.json"
    record.write_bytes(data)
    result = cli("monitor", "--metrics", "http://127.0.0.1:9/metrics", "--record", record,
                 "--once", "--interval", "0")
    _one_line_exit_2(result, named)


def test_a_well_formed_record_gets_past_the_schema(cli, tmp_path):
    """The valid record is refused for what it is (unsigned, other files), not as malformed."""
    record = tmp_path / "approval.json"
    record.write_text(json.dumps(valid_record()))
    result = cli("verify-approval", record, "--signature-only")
    assert result.exit_code == 1 and "malformed" not in result.stdout + result.stderr


def test_unknown_fields_are_allowed_but_never_read(cli, tmp_path):
    record = tmp_path / "approval.json"
    document = valid_record()
    document["predicate"]["future"] = {"anything": [1, 2, 3]}
    record.write_text(json.dumps(document))
    assert cli("verify-approval", record, "--signature-only").exit_code == 1


def test_the_schema_is_a_valid_draft_2020_12_schema():
    from jsonschema import Draft202012Validator

    from dflash_guard.trust.record_schema import SCHEMA

    Draft202012Validator.check_schema(SCHEMA)
    assert Path(__file__).name  # the validator is built once per process (functools.cache)
