"""The approval record: a valid in-toto Statement v1, written atomically, signed and checked."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import pytest
from sigstore.dsse import Statement

from dflash_guard.errors import InputError
from dflash_guard.gate.evidence import DifftestEvidence, PolicyEvidence, VerifiedFiles
from dflash_guard.gate.inputs import LockRead
from dflash_guard.gate.record import CheckRow, approval_statement
from dflash_guard.outcome import Outcome
from dflash_guard.pins.lockfile import Engine
from dflash_guard.trust.closure import policy_closure
from dflash_guard.trust.policy import Signers, load_policy
from dflash_guard.trust.provenance import (
    PREDICATE_TYPE,
    dumps_statement,
    read_approval,
    sign_approval,
    verify_approval,
    write_approval,
)
from tests.support.trust import make_key_pair, write_lock

ENGINE = Engine("llama.cpp", "https://github.com/ggml-org/llama.cpp", "b" * 40,
                "refs/pull/27342/head")


@pytest.fixture
def statement(locked_pair, tmp_path):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    digests = {f"{a.role}/{f.path}": f.sha256 for a in locked_pair.lock.artifacts for f in a.files}
    rows = [
        CheckRow("verify", Outcome.passed("8 files"), VerifiedFiles({}, digests)),
        CheckRow("policy", Outcome.passed("tiers"),
                 PolicyEvidence({"target": "official", "drafter": "official"}, ("W-1",))),
        CheckRow("advisories", Outcome.skipped("not configured")),
        CheckRow("difftest", Outcome.passed("identical"),
                 DifftestEvidence({"identical": True, "tau": 3.5}, 3.5, 32, 1.0)),
    ]
    data = lock.read_bytes()
    policy = load_policy("default")
    return approval_statement(
        LockRead(lock, data, hashlib.sha256(data).hexdigest(), lock),
        locked_pair.lock.__class__(artifacts=locked_pair.lock.artifacts, engines=(ENGINE,)),
        policy, policy_closure(policy), rows,
        time=dt.datetime(2026, 9, 1, 12, 30, 5, 999, tzinfo=dt.UTC),
    )


def test_provenance_statement_is_in_toto_v1(statement):
    """sigstore's own in-toto model accepts it (the statement a DSSE signature would carry)."""
    Statement(dumps_statement(statement))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE


def test_provenance_subjects_are_lockfile_and_every_locked_file(statement, locked_pair, tmp_path):
    names = [s["name"] for s in statement["subject"]]
    assert names[0] == "dflash.lock"
    assert statement["subject"][0]["digest"]["sha256"] == hashlib.sha256(
        (tmp_path / "dflash.lock").read_bytes()).hexdigest()
    locked = sorted(f"{a.role}/{f.path}" for a in locked_pair.lock.artifacts for f in a.files)
    assert sorted(names[1:]) == locked


def test_provenance_predicate_fields(statement):
    predicate = statement["predicate"]
    assert predicate["approved_at"] == "2026-09-01T12:30:05Z"
    assert predicate["engines"] == [{
        "name": "llama.cpp", "uri": f"git+{ENGINE.url}@{ENGINE.commit}",
        "digest": {"gitCommit": ENGINE.commit}, "annotations": {"ref": ENGINE.ref}}]
    assert predicate["policy"]["name"] == "default"
    assert predicate["policy"]["uri"] == "builtin:default"
    closure = policy_closure(load_policy("default"))  # the built-in names no file
    assert predicate["policy"]["digest"]["sha256"] == closure.digest[7:]
    assert predicate["policy"]["closure"] == {
        "text_sha256": load_policy("default").digest[7:], "extends": None, "files": []}
    assert predicate["waivers"] == ["W-1"]
    assert predicate["checks"][3]["evidence"]["acceptance_length"] == 3.5
    assert [a["tier"] for a in predicate["artifacts"]] == ["official", "official"]
    # A skipped check is a row saying so, never "passed", and has no evidence.
    assert predicate["checks"][2] == {"name": "advisories", "verdict": "skipped",
                                      "reason": "not configured", "evidence": None}


def test_provenance_write_read_roundtrip(statement, tmp_path):
    out = tmp_path / "approval.json"
    write_approval(statement, out)
    assert read_approval(out) == json.loads(dumps_statement(statement))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".approval")] == []


def test_provenance_write_failure_leaves_nothing(statement, tmp_path):
    with pytest.raises(InputError, match="cannot write approval record"):
        write_approval(statement, tmp_path / "no-such-folder" / "approval.json")


def test_provenance_read_rejects_other_documents(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"_type": "https://in-toto.io/Statement/v1",
                                "predicateType": "https://slsa.dev/provenance/v1"}))
    with pytest.raises(InputError, match="not a dflash-guard approval"):
        read_approval(path)
    path.write_text("[]")
    with pytest.raises(InputError, match="not an in-toto Statement v1"):
        read_approval(path)


def test_provenance_key_signed_record_verifies_against_approval_signers(statement, tmp_path):
    out = tmp_path / "approval.json"
    write_approval(statement, out)
    assert not verify_approval(out, Signers((), ()))[0].ok  # unsigned
    private, public = make_key_pair(tmp_path)
    assert sign_approval(out, key=private) == tmp_path / "approval.json.sig"
    [check] = verify_approval(out, Signers((), (public,)))
    assert check.ok
    _, other = make_key_pair(tmp_path, "other")
    assert not verify_approval(out, Signers((), (other,)))[0].ok
    out.write_bytes(out.read_bytes().replace(b"\"passed\"", b"\"PASSED\""))
    assert not verify_approval(out, Signers((), (public,)))[0].ok
