"""The gate approves the clean fixture pair and records why, as an in-toto statement."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re

import pytest

from dflash_guard import __version__
from dflash_guard.gate import STEPS, ApprovalSigning, GateOptions, run_gate
from dflash_guard.pins.lockfile import Engine
from dflash_guard.trust.closure import policy_closure
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.provenance import PREDICATE_TYPE, read_approval
from dflash_guard.trust.signing import verify_key_signature
from tests.support.trust import (
    fixture_code_sha256,
    flip_signature_byte,
    make_key_pair,
    release_map,
    write_lock,
    write_policy,
)

VLLM = Engine("vllm", "https://github.com/vllm-project/vllm", "d" * 40, "v0.11.0")


@pytest.fixture(scope="module")
def approved(locked_pair, tmp_path_factory):
    """One approving gate run, signed with a key, shared by the content tests."""
    folder = tmp_path_factory.mktemp("approved")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH_GUARD_CACHE_DIR", str(folder / "cache"))
        private, public = make_key_pair(folder)
        policy = write_policy(folder, release_map(VLLM.url, "v0.11.0", VLLM.commit))
        lock = write_lock(dataclasses.replace(locked_pair.lock, engines=(VLLM,)),
                          folder / "dflash.lock")
        out = folder / "approval.json"
        result = run_gate(GateOptions(lock, policy, locked_pair.roots, out=out,
                                      signing=ApprovalSigning(key=private)))
    return result, lock, policy, out, public


def test_gate_approves_the_clean_pair(approved):
    result, _, _, out, _ = approved
    assert result.approved, result.reason
    assert [c.name for c in result.checks] == list(STEPS)
    assert all(c.outcome.ok for c in result.checks)
    assert result.record == out and out.is_file()


def test_gate_approval_record_content(approved, locked_pair):
    result, lock, policy, out, _ = approved
    statement = read_approval(out)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    assert subjects.pop("dflash.lock") == hashlib.sha256(lock.read_bytes()).hexdigest()
    expected = {f"{a.role}/{f.path}": f.sha256 for a in locked_pair.lock.artifacts for f in a.files}
    assert subjects == expected and len(expected) >= 4
    predicate = statement["predicate"]
    assert predicate["passed"] is True
    assert predicate["tool"] == {"name": "dflash-guard", "version": __version__}
    closure = policy_closure(load_policy(policy))
    assert predicate["policy"]["digest"]["sha256"] == closure.digest.removeprefix("sha256:")
    assert predicate["policy"]["closure"]["text_sha256"] == (
        load_policy(policy).digest.removeprefix("sha256:"))
    named = {(f["field"], f["path"]) for f in predicate["policy"]["closure"]["files"]}
    assert ("difftest.prompts", "prompts.jsonl") in named  # the policy's prompt set, by content
    assert predicate["policy"]["closure"]["extends"] is None
    assert predicate["engines"] == [{
        "name": "vllm", "uri": f"git+{VLLM.url}@{VLLM.commit}",
        "digest": {"gitCommit": VLLM.commit}, "annotations": {"ref": "v0.11.0"}}]
    evidence = {c["name"]: c["evidence"] for c in predicate["checks"]}
    assert evidence["difftest"]["identical"] is True and evidence["difftest"]["prompts"] == 2
    assert evidence["difftest"]["acceptance_length"] == evidence["difftest"]["tau"] >= 1.0
    assert evidence["scan"]["failing"] == 0 and set(evidence["scan"]["roles"]) == {
        "target", "drafter"}
    assert [c["name"] for c in predicate["checks"]] == list(STEPS)
    # One row per check in run order; evidence for each that ran, none for the skipped ones.
    assert {c["verdict"] for c in predicate["checks"]} <= {"passed", "skipped"}
    assert [c["evidence"] is not None for c in predicate["checks"]] == [
        c["verdict"] == "passed" for c in predicate["checks"]]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", predicate["approved_at"])
    assert {a["role"]: a["tier"] for a in predicate["artifacts"]} == {
        "target": "official", "drafter": "official"}


def test_gate_approval_record_is_signed_with_the_key(approved):
    result, _, _, out, public = approved
    assert result.signature == out.with_name("approval.json.sig")
    assert verify_key_signature(out, result.signature, [public]).ok
    tampered = out.with_name("tampered.json")
    tampered.write_bytes(out.read_bytes().replace(b'"passed"', b'"PASSED"'))
    assert not verify_key_signature(tampered, result.signature, [public]).ok
    forged = out.with_name("forged.sig")
    forged.write_bytes(flip_signature_byte(result.signature.read_bytes()))
    assert not verify_key_signature(out, forged, [public]).ok


def test_gate_cli_prints_the_table_and_refuses_json(cli, locked_pair, tmp_path):
    """Through the CLI: a refusal is exit 1 with the reason; --format json is parseable."""
    tampered_policy = write_policy(tmp_path, ("min_tau: 1.5", "min_tau: 99"))
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = cli("gate", "--lock", lock, "--policy", tampered_policy, "--root",
                 f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}",
                 "--output", tmp_path / "approval.json", "--format", "json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is False
    assert report["checks"][-1]["name"] == "difftest"
    assert "below the policy's minimum 99" in report["reason"]
    assert not (tmp_path / "approval.json").exists()


def test_gate_dev_policy_reviews_the_fixture_drafter_code():
    """`make demo` gates the fixture pair under dev.yaml: its reviewed entry must not drift."""
    assert fixture_code_sha256() in load_policy("dev").reviewed_sha256
