"""Issue 45 items 1 and 2: a record names its policy by its closure, and the bytes the gate read.

Q4: a byte-identical copy of a policy beside other files is another policy. Q8: a lockfile (or a
file the policy names) swapped while the checks run is never what the record approves.
Beyond the doc: a moved copy with the same files still verifies; a changed approval key and a
file added to a feed folder change the closure; a policy file changed mid-run refuses too; and
`verify-approval` refuses a record whose lockfile subject and judged content disagree."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from dflash_guard.gate import ApprovalSigning, GateOptions, run_gate
from dflash_guard.gate import run as gate_run
from dflash_guard.pins.lockfile import Engine
from dflash_guard.trust.intoto import dumps_json
from dflash_guard.trust.signing import sign_with_key
from tests.support.trust import make_key_pair, write_lock, write_policy

SIGNER = ("  approvals: {identities: [], public_keys: []}",
          "  approvals: {identities: [], public_keys: [approver.pub]}")
PR_HEAD = Engine("vllm", "https://github.com/vllm-project/vllm", "e" * 40, "refs/pull/52816/head")


@pytest.fixture
def approval(locked_pair, tmp_path):
    """A signed approval under `prod/policy.yaml` (its key beside it, named relatively)."""
    prod = tmp_path / "prod"
    prod.mkdir()
    private, _ = make_key_pair(prod, "approver")
    policy = write_policy(prod, SIGNER)
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    record = tmp_path / "approval.json"
    result = run_gate(GateOptions(lock, policy, locked_pair.roots, out=record,
                                  signing=ApprovalSigning(key=private)))
    assert result.approved, result.reason
    roots = [a for role, folder in locked_pair.roots.items()
             for a in ("--root", f"{role}={folder}")]
    return record, policy, lock, private, roots


def _verify(cli, record, policy, lock, roots):
    result = cli("verify-approval", record, "--policy", policy, "--lock", lock, *roots,
                 "--format", "json")
    return result, (json.loads(result.stdout) if result.stdout.strip() else None)


def test_a_copy_beside_other_files_is_another_policy(cli, approval, tmp_path):
    """Q4: the same text beside another prompt set, or another approvals key, is refused; the
    same text moved with the same files verifies."""
    record, policy, lock, _, roots = approval
    moved = shutil.copytree(policy.parent, tmp_path / "moved")
    result, verdict = _verify(cli, record, moved / "policy.yaml", lock, roots)
    assert result.exit_code == 0, result.stdout + result.stderr

    (moved / "prompts.jsonl").write_text('{"id": "easy", "prompt": "a"}\n')
    result, verdict = _verify(cli, record, moved / "policy.yaml", lock, roots)
    assert result.exit_code == 1
    problem = verdict["policy_problem"]
    assert "the policy's text is the record's, but what it names is not" in problem
    assert "difftest.prompts prompts.jsonl: other bytes" in problem

    staging = shutil.copytree(policy.parent, tmp_path / "staging")  # another approver's key
    make_key_pair(staging, "approver")
    result, verdict = _verify(cli, record, staging / "policy.yaml", lock, roots)
    assert result.exit_code == 1
    assert "approvals public key approver.pub: other bytes" in verdict["policy_problem"]


def test_a_record_without_a_closure_fails_closed(cli, approval):
    """A record that names its policy by text alone (before closures) proves nothing about the
    files the policy names: refused with the reason, even when correctly signed."""
    record, policy, lock, private, roots = approval
    statement = json.loads(record.read_bytes())
    named = statement["predicate"]["policy"]
    named["digest"]["sha256"] = named.pop("closure")["text_sha256"]  # as records were
    record.write_bytes(dumps_json(statement))
    sign_with_key(record, private)
    result, verdict = _verify(cli, record, policy, lock, roots)
    assert result.exit_code == 1
    assert "names its policy by its text only" in verdict["policy_problem"]
    assert all(s["verdict"] == "passed" for s in verdict["signatures"])


def test_the_lock_verify_approval_gets_must_be_the_one_judged(cli, approval, tmp_path,
                                                             locked_pair):
    """Q8, the verifier's side: a record whose lockfile subject is one lock's sha256 while its
    checks judged another (the old gate's late hash) does not verify with either lock."""
    record, policy, lock, private, roots = approval
    (tmp_path / "b").mkdir()
    other = write_lock(dataclasses.replace(locked_pair.lock, engines=(PR_HEAD,)),
                       tmp_path / "b" / "dflash.lock")
    statement = json.loads(record.read_bytes())
    statement["subject"][0]["digest"]["sha256"] = hashlib.sha256(other.read_bytes()).hexdigest()
    record.write_bytes(dumps_json(statement))
    sign_with_key(record, private)
    result, verdict = _verify(cli, record, policy, other, roots)
    assert result.exit_code == 1
    assert "its checks judged another lock" in verdict["problems"][0]
    result, verdict = _verify(cli, record, policy, lock, roots)
    assert result.exit_code == 1
    assert "not the lockfile the record approved" in verdict["problems"][0]


def _swap_during(monkeypatch, check_name: str, swap) -> None:
    """Run `swap()` when the gate reaches `check_name` (a hook mid-run)."""
    def wrapped(check):
        def run(inputs):
            swap()
            return check.run(inputs)
        return dataclasses.replace(check, run=run)

    monkeypatch.setattr(gate_run, "CHECKS", tuple(
        wrapped(c) if c.name == check_name else c for c in gate_run.CHECKS))


@pytest.mark.parametrize("when", ["lockfile signature", "difftest"])
def test_a_lock_swapped_mid_run_is_not_approved(locked_pair, tmp_path, monkeypatch, when):
    """Q8: lock B (a PR-head engine the gate refuses) moved into place while the checks run:
    the checks judged A (read once), the advisory audit and signature check read A's bytes, and
    the gate refuses to write a record while the disk holds other bytes than the ones judged."""
    policy = write_policy(tmp_path / "p")
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    swapped = write_lock(dataclasses.replace(locked_pair.lock, engines=(PR_HEAD,)),
                         tmp_path / "b.lock")
    _swap_during(monkeypatch, when, lambda: swapped.replace(lock))
    out = tmp_path / "approval.json"
    result = run_gate(GateOptions(lock, policy, locked_pair.roots, out=out))
    assert not result.approved
    assert result.reason.startswith("evidence: changed during the run")
    assert f"--lock {lock}: other bytes than the ones judged" in result.reason
    assert all(c.outcome.ok for c in result.checks)  # every check judged A, which passes
    assert not out.exists()


def test_a_policy_file_changed_mid_run_is_not_approved(locked_pair, tmp_path, monkeypatch):
    """Beyond Q8: the prompt set the policy names is rewritten while the checks run (an easy
    set for the diff test): the closure hashed at the start is no longer the disk's."""
    policy = write_policy(tmp_path / "p")
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    prompts = policy.parent / "prompts.jsonl"
    _swap_during(monkeypatch, "difftest",
                 lambda: prompts.write_text('{"id": "easy", "prompt": "a"}\n'))
    result = run_gate(GateOptions(lock, policy, locked_pair.roots, out=tmp_path / "a.json"))
    assert not result.approved
    assert "difftest.prompts prompts.jsonl: other bytes" in result.reason
    assert not (tmp_path / "a.json").exists()


def test_the_record_names_the_lock_bytes_read_not_a_later_read(locked_pair, tmp_path,
                                                              monkeypatch):
    """A swap put back before the end: the record's lockfile subject and content digest are
    those of the bytes read at the start (A), which is what every check judged."""
    policy = write_policy(tmp_path / "p")
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    original = lock.read_bytes()
    swapped = write_lock(dataclasses.replace(locked_pair.lock, engines=(PR_HEAD,)),
                         tmp_path / "b.lock").read_bytes()
    _swap_during(monkeypatch, "lockfile signature", lambda: lock.write_bytes(swapped))
    _swap_during(monkeypatch, "difftest", lambda: lock.write_bytes(original))
    result = run_gate(GateOptions(lock, policy, locked_pair.roots, out=tmp_path / "a.json"))
    assert result.approved, result.reason
    statement = result.statement
    assert statement is not None
    subject = statement["subject"][0]
    assert subject["digest"]["sha256"] == hashlib.sha256(original).hexdigest()
    assert statement["predicate"]["engines"] == []  # A's, not B's
    assert Path(subject["name"]).name == "dflash.lock"
