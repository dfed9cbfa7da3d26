"""`verify-approval` says what went wrong in words (newcomer P10): an edited record "has changed
since it was signed" (a DSSE attestation) or was "changed after signing" (a model_signing
bundle), never model_signing's `Digest(... digest_value=b'...')` repr; a record checked
under a policy that names no approval key is UNCHECKED, not a BAD SIGNATURE; an unsigned record
says "not signed" once."""

from __future__ import annotations

import json

import pytest

from dflash_guard.gate import ApprovalSigning, GateOptions, run_gate
from tests.support.trust import copy_folder, make_key_pair, write_lock, write_policy

SIGNER = ("  approvals: {identities: [], public_keys: []}",
          "  approvals: {identities: [], public_keys: [KEY]}")


@pytest.fixture
def signed(locked_pair, tmp_path):
    private, public = make_key_pair(tmp_path)
    policy = write_policy(tmp_path / "p", (SIGNER[0], SIGNER[1].replace("KEY", str(public))))
    target = copy_folder(locked_pair.target, tmp_path / "target")
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    record = tmp_path / "approval.json"
    result = run_gate(GateOptions(lock, policy, {"target": target, "drafter": drafter},
                                  out=record, signing=ApprovalSigning(key=private)))
    assert result.approved, result.reason
    return record, policy, lock, ("--root", f"target={target}", "--root", f"drafter={drafter}")


def test_an_edited_record_reads_as_changed_after_signing(cli, signed):
    record, policy, lock, roots = signed
    statement = json.loads(record.read_text())
    statement["predicate"]["passed"] = True  # any edit of the bytes
    record.write_text(json.dumps(statement, indent=1))
    result = cli("verify-approval", record, "--policy", policy, "--lock", lock, *roots)
    assert result.exit_code == 1
    assert "BAD SIGNATURE" in result.stdout
    assert any(words in result.stdout
               for words in ("changed since it was signed", "changed after signing"))
    assert "Digest(" not in result.stdout and "b'" not in result.stdout


def test_a_policy_without_an_approval_key_leaves_it_unchecked(cli, signed, tmp_path):
    record, _, lock, roots = signed
    other = write_policy(tmp_path / "other")  # the default: no approval public key
    result = cli("verify-approval", record, "--policy", other, "--lock", lock, *roots)
    assert result.exit_code == 1
    assert "UNCHECKED SIGNATURE: the policy names no approval public key" in result.stdout
    assert "BAD SIGNATURE" not in result.stdout


def test_an_unsigned_record_says_not_signed_once(cli, signed):
    record, policy, lock, roots = signed
    record.with_name(record.name + ".sig").unlink()
    result = cli("verify-approval", record, "--policy", policy, "--lock", lock, *roots)
    assert result.exit_code == 1
    assert "NOT SIGNED: nothing vouches" in result.stdout
    assert "not signed: not signed" not in result.stdout.lower()


def test_verify_approval_shows_its_hashing_and_quiet_hides_it(cli, signed):
    """Newcomer row 63: verify-approval hashed gigabytes in silence; `--quiet` hides it."""
    record, policy, lock, roots = signed
    args = ("verify-approval", record, "--policy", policy, "--lock", lock, *roots)
    shown = cli(*args)
    assert shown.exit_code == 0 and "hashing drafter: " in shown.stderr, shown.stderr
    quiet = cli(*args, "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == ""


@pytest.mark.parametrize("command", [("audit",), ("monitor",), ("verify-installed",),
                                     ("policy", "check"), ("verify-approval",)])
def test_every_reporting_command_takes_quiet(cli, command):
    result = cli(*command, "-h")
    assert result.exit_code == 0 and "--quiet" in result.stdout
