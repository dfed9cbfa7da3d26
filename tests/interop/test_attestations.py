"""Key-signed approvals and lockfiles are DSSE in-toto attestations other tools accept (issue
47): sigstore-js's `@sigstore/verify` and securesystemslib verify them with nothing but the public
key, read the approval statement out of the envelope, and refuse a tampered one; in-toto-attestation
validates each payload as a Statement v1."""

from __future__ import annotations

import hashlib
import json

import pytest
from securesystemslib.exceptions import VerificationError

from dflash_guard.gate import ApprovalSigning, GateOptions, run_gate
from dflash_guard.trust.attestation import SIGNED_FILE_PREDICATE
from dflash_guard.trust.policy import Signers
from dflash_guard.trust.provenance import PREDICATE_TYPE, verify_approval
from dflash_guard.trust.signing import sign_with_key
from tests.support.interop import (
    der_sha256,
    securesystemslib_verify,
    sign_model_signing,
    sigstore_js,
    validate_in_toto,
    with_payload,
)
from tests.support.trust import flip_signature_byte, make_key_pair, write_lock, write_policy


@pytest.fixture(scope="module")
def approved(locked_pair, tmp_path_factory):
    """One approving gate run, its record signed with a key: (record, signature, lock, key)."""
    folder = tmp_path_factory.mktemp("approved")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH_GUARD_CACHE_DIR", str(folder / "cache"))
        private, public = make_key_pair(folder)
        lock = write_lock(locked_pair.lock, folder / "dflash.lock")
        out = folder / "approval.json"
        result = run_gate(GateOptions(lock, write_policy(folder), locked_pair.roots, out=out,
                                      signing=ApprovalSigning(key=private)))
    assert result.approved and result.signature is not None, result.reason
    return out, result.signature, lock, public


def test_sigstore_js_verifies_a_key_signed_approval(approved, locked_pair):
    record, sig, lock, public = approved
    done = sigstore_js(sig, public, lock)  # cosign's claim check: the lockfile is a subject
    assert done.returncode == 0, done.stderr
    verified = json.loads(done.stdout)
    assert verified["payloadType"] == "application/vnd.in-toto+json"
    assert verified["keyid"] == der_sha256(public)
    statement = verified["statement"]
    assert statement == json.loads(record.read_bytes())  # the payload is the record itself
    assert statement["predicateType"] == PREDICATE_TYPE
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    assert subjects["dflash.lock"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    locked = {f"{a.role}/{f.path}": f.sha256 for a in locked_pair.lock.artifacts for f in a.files}
    assert {k: v for k, v in subjects.items() if k != "dflash.lock"} == locked


def test_sigstore_js_refuses_a_tampered_approval(approved, tmp_path):
    record, sig, lock, public = approved
    edited = record.read_bytes().replace(b'"passed": true', b'"passed": false', 1)
    assert edited != record.read_bytes()
    forged = sigstore_js(with_payload(sig, edited, tmp_path / "edited.sig"), public)
    assert forged.returncode == 1 and "SIGNATURE_ERROR" in forged.stderr
    flipped = tmp_path / "flipped.sig"
    flipped.write_bytes(flip_signature_byte(sig.read_bytes()))
    assert sigstore_js(flipped, public).returncode == 1
    _, other = make_key_pair(tmp_path, "other")
    stranger = sigstore_js(sig, other)
    assert stranger.returncode == 1 and "key not found" in stranger.stderr


def test_securesystemslib_verifies_the_approval_by_keyid(approved, tmp_path):
    record, sig, _, public = approved
    assert securesystemslib_verify(sig, public) == record.read_bytes()
    assert validate_in_toto(record.read_bytes()) == PREDICATE_TYPE
    edited = with_payload(sig, record.read_bytes() + b" ", tmp_path / "edited.sig")
    with pytest.raises(VerificationError):
        securesystemslib_verify(edited, public)
    _, other = make_key_pair(tmp_path, "other")
    with pytest.raises(VerificationError):
        securesystemslib_verify(sig, other)


def test_a_key_signed_lockfile_is_an_attestation_about_its_sha256(tmp_path):
    private, public = make_key_pair(tmp_path)
    lock = tmp_path / "dflash.lock"
    lock.write_text("lockfile_version: 1\nartifacts: []\n")
    sig = sign_with_key(lock, private)
    done = sigstore_js(sig, public, lock)
    assert done.returncode == 0, done.stderr
    statement = json.loads(done.stdout)["statement"]
    assert statement["predicateType"] == SIGNED_FILE_PREDICATE
    assert statement["subject"] == [{"name": "dflash.lock", "digest": {
        "sha256": hashlib.sha256(lock.read_bytes()).hexdigest()}}]
    payload = securesystemslib_verify(sig, public)
    assert json.loads(payload) == statement and validate_in_toto(payload) == SIGNED_FILE_PREDICATE
    lock.write_text("lockfile_version: 1\nartifacts: [] # edited\n")
    changed = sigstore_js(sig, public, lock)
    assert changed.returncode == 1 and "no subject has the sha256" in changed.stderr


def test_an_approval_signed_in_the_old_format_still_verifies(approved, tmp_path):
    """Records signed by releases before this one (OpenSSF Model Signing) are still accepted,
    and still refused when edited."""
    record, _, _, _ = approved
    private, public = make_key_pair(tmp_path)
    old = tmp_path / "approval.json"
    old.write_bytes(record.read_bytes())
    sign_model_signing(old, private)
    [check] = verify_approval(old, Signers((), (public,)))
    assert check.verified, check.reason
    old.write_bytes(record.read_bytes().replace(b'"passed": true', b'"passed": false', 1))
    [check] = verify_approval(old, Signers((), (public,)))
    assert not check.ok


def test_a_missing_sigstore_js_fails_the_suite(monkeypatch, tmp_path):
    """Without `make interop-js` the interop tests fail, naming the fix, rather than skip."""
    import tests.support.interop as interop

    monkeypatch.setattr(interop, "JS", tmp_path)
    with pytest.raises(pytest.fail.Exception, match="make interop-js"):
        interop.sigstore_js(tmp_path / "x.sig", tmp_path / "x.pub")
