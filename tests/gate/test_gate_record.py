"""The approval record as evidence that binds exactly what it names (issue 34): `verify-approval`
compares the whole folders with the approved set (P1), only under the record's own policy (P4),
and the gate finds an output it cannot write before any check runs (P10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.gate import STEPS, ApprovalSigning, GateOptions, run_gate
from dflash_guard.gate.checks import CHECKS
from dflash_guard.trust.closure import policy_closure
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.provenance import read_approval
from tests.support.trust import copy_folder, make_key_pair, one_line, write_lock, write_policy

SIGNER = ("  approvals: {identities: [], public_keys: []}",
          "  approvals: {identities: [], public_keys: [KEY]}")


@pytest.fixture
def approval(locked_pair, tmp_path):
    """A signed approval of copies of the pair (so the tests can edit them), and the
    `verify-approval` arguments that check it."""
    private, public = make_key_pair(tmp_path)
    policy = write_policy(tmp_path / "p", (SIGNER[0], SIGNER[1].replace("KEY", str(public))))
    target = copy_folder(locked_pair.target, tmp_path / "target")
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    record = tmp_path / "approval.json"
    result = run_gate(GateOptions(lock, policy, {"target": target, "drafter": drafter},
                                  out=record, signing=ApprovalSigning(key=private)))
    assert result.approved, result.reason
    args = ("verify-approval", record, "--policy", policy, "--lock", lock,
            "--root", f"target={target}", "--root", f"drafter={drafter}", "--format", "json")
    return args, target, drafter, record, policy


def _problems(cli, args) -> list[str]:
    result = cli(*args)
    assert result.exit_code == 1, result.stdout + result.stderr
    return json.loads(result.stdout)["problems"]


def test_the_record_has_one_row_per_check_in_run_order(approval):
    *_, record, _ = approval
    rows = read_approval(record)["predicate"]["checks"]
    assert [row["name"] for row in rows] == list(STEPS) == [c.name for c in CHECKS]
    for row in rows:  # a skipped check has no evidence; one that passed always has
        assert (row["evidence"] is None) is (row["verdict"] == "skipped"), row


def test_verify_approval_passes_on_the_approved_folders(cli, approval):
    args, *_ = approval
    result = cli(*args)
    assert result.exit_code == 0, result.stdout
    verdict = json.loads(result.stdout)
    assert verdict["passed"] and verdict["problems"] == [] and verdict["files_checked"] >= 4


@pytest.mark.parametrize("added", ["chat_template.jinja", "modeling_extra.py",
                                   ".hidden/processor_config.json"])
def test_verify_approval_refuses_a_file_added_after_the_approval(cli, approval, added):
    """P1: a file a loader reads (a template transformers prefers, new code, a hidden config)
    is not in the approved set, so the folder is no longer the one approved."""
    args, target, *_ = approval
    path = target / added
    path.parent.mkdir(exist_ok=True)
    path.write_text('{{ "injected system prompt" }}')
    assert _problems(cli, args) == [f"target/{added}: not in the lock"]


def test_verify_approval_refuses_a_removed_or_edited_file(cli, approval):
    args, target, drafter, *_ = approval
    (drafter / "config.json").unlink()
    data = bytearray((target / "model.safetensors").read_bytes())
    data[-1] ^= 1  # same size, other bytes
    (target / "model.safetensors").write_bytes(bytes(data))
    assert _problems(cli, args) == ["target/model.safetensors: sha256 differs from the lock",
                                    "drafter/config.json: missing"]


def test_verify_approval_refuses_another_lockfile(cli, approval, tmp_path, locked_pair):
    args, *_ = approval
    other = tmp_path / "other.lock"
    other.write_bytes(Path(args[5]).read_bytes() + b"\n")
    swapped = (*args[:5], other, *args[6:])
    assert _problems(cli, swapped) == [f"--lock {other}: not the lockfile the record approved"]


def test_verify_approval_binds_the_record_to_its_policy(cli, approval, locked_pair, tmp_path):
    """P4: a record approved under one policy does not verify under another, even one whose
    approval signers signed it; the operator can list the record's policy digest explicitly."""
    args, _, _, record, policy = approval
    other = write_policy(tmp_path / "other", (SIGNER[0], SIGNER[1].replace(
        "KEY", str(tmp_path / "key.pub"))), ("min_tau: 1.5", "min_tau: 2.5"))
    under_other = (*args[:3], other, *args[4:])
    result = cli(*under_other)
    assert result.exit_code == 1
    verdict = json.loads(result.stdout)
    digest = policy_closure(load_policy(str(policy))).digest  # the text and the files it names
    assert verdict["record_policy"]["digest"]["sha256"] == digest.removeprefix("sha256:")
    assert "not under" in verdict["policy_problem"] and verdict["problems"] == []
    text = cli(*under_other[:-2])
    assert "WRONG POLICY" in text.stdout and "NOT VERIFIED" in text.stdout
    accepted = cli(*under_other, "--accept-policy-digest", digest)
    assert accepted.exit_code == 0, accepted.stdout


def test_verify_approval_on_an_unsigned_record_says_so_and_checks_the_files(
        cli, locked_pair, tmp_path):
    """Newcomer P3: not "BAD SIGNATURE" naming a bundle nobody asked for; the files are still
    compared and said to match; --public-key accepts a signer, as cosign's --key does."""
    policy = write_policy(tmp_path / "p")
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    record = tmp_path / "approval.json"
    gated = cli("gate", "--lock", lock, "--policy", policy, "--root",
                f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}",
                "--output", record)
    assert gated.exit_code == 0 and "unsigned: verify-approval" in one_line(gated.stdout)
    args = ("verify-approval", record, "--policy", policy, "--lock", lock,
            "--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}")
    result = cli(*args)
    assert result.exit_code == 1
    assert "NOT SIGNED" in result.stdout and "BAD SIGNATURE" not in result.stdout
    assert "sigstore.json" not in result.stdout.split("NOT SIGNED")[0]
    assert "approved files match the disk" in result.stdout
    private, public = make_key_pair(tmp_path)
    assert cli("sign", record, "--key", private).exit_code == 0
    assert cli(*args).exit_code == 1  # a signature nobody accepts proves nothing
    assert cli(*args, "--public-key", public).exit_code == 0


@pytest.mark.parametrize("where", ["missing/approval.json", "file/approval.json"])
def test_gate_refuses_an_unwritable_out_before_any_check(cli, locked_pair, tmp_path, where):
    """P10: the output's folder is checked before the first check, not after the diff test."""
    (tmp_path / "file").write_text("")
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = cli("gate", "--lock", lock, "--policy", "dev", "--root",
                 f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}",
                 "--output", tmp_path / where)
    assert result.exit_code == 2 and result.stdout == ""  # no table: nothing ran
    assert "--output" in result.stderr and str(tmp_path / where.split("/")[0]) in result.stderr


def test_a_record_of_another_version_is_refused(approval, tmp_path):
    """Only approval/v3 was ever released: a record of any other predicate type is not read."""
    *_, record, _ = approval
    v2 = tmp_path / "v2.json"
    document = json.loads(record.read_text())
    document["predicateType"] = document["predicateType"].replace("/v3", "/v2")
    v2.write_text(json.dumps(document))
    with pytest.raises(InputError):
        read_approval(v2)
