"""cosign's spellings and habits (issue 47, item 5): its flag names on every verifying command,
an identity regexp, a signature bundle named with --bundle, the shipped trust root with
--offline, and encrypted private keys opened with a passphrase from the environment."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from dflash_guard.cli.options import trusted_root
from dflash_guard.trust.intoto import Statement, Subject
from dflash_guard.trust.policy import Identity, Signers
from dflash_guard.trust.provenance import verify_approval
from dflash_guard.trust.signing import (
    production_trust_root,
    sign_with_key,
    verify_blob_bundle,
)
from tests.support.trust import flip_signature_byte, make_key_pair, one_line, write_lock

IBM_ISSUER = "https://sigstore.verify.ibm.com/oauth2"


@pytest.fixture
def ibm_bundle(shared_vectors: Path, tmp_path: Path) -> tuple[bytes, Path]:
    """A keyless DSSE bundle (model_signing's own test vector) and its statement."""
    sig = tmp_path / "model.sig"
    shutil.copyfile(shared_vectors / "model-signing" / "v1.1.0-sigstore" / "model.sig", sig)
    return base64.b64decode(json.loads(sig.read_text())["dsseEnvelope"]["payload"]), sig


@pytest.mark.parametrize(("pattern", "accepted"), [
    (r"[a-z]+@us\.ibm\.com", True),
    (r"stefanb@.*", True),
    (r"stefanb", False),  # anchored: a part of the identity is not a match
    (r".*@example\.com", False),
])
def test_an_identity_regexp_matches_the_whole_identity(ibm_bundle, pattern, accepted):
    payload, sig = ibm_bundle
    identity = Identity(pattern, IBM_ISSUER, regexp=True)
    check = verify_blob_bundle(payload, sig, [identity], trust_root=production_trust_root())
    assert check.verified is accepted, check.reason
    if accepted:
        assert check.signer == f"/{pattern}/ (a regexp) ({IBM_ISSUER})"
    wrong_issuer = Identity(pattern, "https://accounts.google.com", regexp=True)
    assert not verify_blob_bundle(payload, sig, [wrong_issuer],
                                  trust_root=production_trust_root()).ok


def test_a_keyless_dsse_bundle_vouches_only_for_what_it_covers(ibm_bundle, tmp_path):
    """A DSSE bundle over a file: it is the file itself or names its sha256; another file
    signed by the same accepted identity is not covered."""
    payload, sig = ibm_bundle
    ibm = [Identity("stefanb@us.ibm.com", IBM_ISSUER)]
    assert verify_blob_bundle(payload, sig, ibm, trust_root=production_trust_root()).verified
    other = verify_blob_bundle(b"lockfile_version: 1\n", sig, ibm,
                               trust_root=production_trust_root(), subject="dflash.lock")
    assert not other.ok and "neither dflash.lock nor a signature of a file" in other.reason


def test_offline_uses_the_trust_root_the_sigstore_package_ships(tmp_path):
    assert trusted_root(None, True) == production_trust_root()
    given = tmp_path / "root.json"
    assert trusted_root(given, True) == given and trusted_root(None, False) is None


@pytest.mark.parametrize("command", ["verify", "verify-approval", "gate", "audit"])
def test_every_verifying_command_takes_cosigns_identity_spellings(cli, command, tmp_path):
    """Each alias reaches the same check as the project's own flag: an identity with no issuer,
    an issuer with no identity, a regexp that does not compile are usage errors, not unknown
    options."""
    record = [str(tmp_path / "approval.json")] if command == "verify-approval" else []
    cases = [
        (("--certificate-identity", "me@example.com"), "needs --issuer"),
        (("--certificate-identity-regexp", "me@.*"), "needs --issuer"),
        (("--cert-identity", "me@example.com"), "needs --issuer"),
        (("--certificate-oidc-issuer", "https://accounts.google.com"), "needs --identity"),
        (("--certificate-identity-regexp", "(", "--certificate-oidc-issuer", "https://x"),
         "--identity-regexp '('"),
    ]
    for flags, message in cases:
        result = cli(command, *record, "--lock", tmp_path / "missing.lock", *flags)
        assert result.exit_code == 2, (flags, result.stderr)
        assert message in one_line(result.stderr), (flags, result.stderr)


@pytest.mark.parametrize("command", ["verify", "verify-approval", "gate", "audit"])
def test_every_verifying_command_takes_cosigns_trust_and_bundle_flags(command):
    import typer.main

    from dflash_guard._cli import build_app

    leaf = typer.main.get_command(build_app()).commands[command]  # type: ignore[attr-defined]
    options = {name for param in leaf.params for name in param.opts}
    assert {"--trusted-root", "--trust-root", "--offline", "--bundle", "--public-key",
            "--certificate-identity", "--cert-identity", "--identity",
            "--certificate-identity-regexp", "--certificate-oidc-issuer", "--cert-oidc-issuer",
            "--issuer"} <= options


def test_verify_checks_the_bundle_named_with_bundle(cli, locked_pair, tmp_path):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    private, public = make_key_pair(tmp_path)
    elsewhere = sign_with_key(lock, private, out=tmp_path / "lock.bundle")
    roots = ("--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}")
    good = cli("verify", "--lock", lock, *roots, "--public-key", public, "--bundle", elsewhere,
               "--format", "json")
    assert good.exit_code == 0, good.stdout
    [check] = json.loads(good.stdout)["signatures"]
    assert check["verdict"] == "passed" and check["signature"] == str(elsewhere)
    elsewhere.write_bytes(flip_signature_byte(elsewhere.read_bytes()))
    bad = cli("verify", "--lock", lock, *roots, "--public-key", public, "--bundle", elsewhere)
    assert bad.exit_code == 1 and "BAD SIGNATURE" in bad.stdout
    nobody = cli("verify", "--lock", lock, *roots, "--bundle", elsewhere, "--format", "json")
    assert nobody.exit_code == 1  # a bundle asked for by name is checked, never "unchecked"


def test_verify_approval_checks_the_bundle_named_with_bundle(tmp_path):
    private, public = make_key_pair(tmp_path)
    record = tmp_path / "approval.json"
    record.write_bytes(Statement((Subject("dflash.lock", {"sha256": "0" * 64}),),
                                 "https://example.com/approval", {"passed": True}).dumps())
    bundle = sign_with_key(record, private, out=tmp_path / "approval.bundle")
    [check] = verify_approval(record, Signers((), (public,)), bundle=bundle)
    assert check.verified and check.signature == str(bundle)
    record.write_bytes(record.read_bytes().replace(b"true", b"false"))
    [check] = verify_approval(record, Signers((), (public,)), bundle=bundle)
    assert not check.ok and "changed since it was signed" in check.reason


def test_audit_takes_a_bundle_only_for_one_feed_file(cli, tmp_path):
    lock = tmp_path / "dflash.lock"
    lock.write_text("lockfile_version: 3\nartifacts: []\n")
    result = cli("audit", "--lock", lock, "--advisories", tmp_path, "--bundle", lock)
    assert result.exit_code == 2 and "exactly one --advisories FILE" in one_line(result.stderr)


def _encrypted_key(folder: Path, passphrase: bytes) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / "enc.pem", folder / "enc.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.BestAvailableEncryption(passphrase)))
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def test_an_encrypted_key_signs_with_the_passphrase_from_the_environment(cli, tmp_path,
                                                                          monkeypatch):
    from dflash_guard.trust.signing import verify_key_signature

    private, public = _encrypted_key(tmp_path, b"correct horse")
    lock = tmp_path / "dflash.lock"
    lock.write_text("lockfile_version: 3\nartifacts: []\n")
    monkeypatch.delenv("COSIGN_PASSWORD", raising=False)
    unset = cli("sign", lock, "--key", private)  # no variable, and stdin is not a terminal
    assert unset.exit_code == 2 and "set COSIGN_PASSWORD" in one_line(unset.stderr)
    monkeypatch.setenv("COSIGN_PASSWORD", "wrong")
    wrong = cli("sign", lock, "--key", private)
    assert wrong.exit_code == 2 and "passphrase does not open" in one_line(wrong.stderr)
    assert not (tmp_path / "dflash.lock.sig").exists()
    monkeypatch.setenv("COSIGN_PASSWORD", "correct horse")
    assert cli("sign", lock, "--key", private).exit_code == 0
    assert verify_key_signature(lock, tmp_path / "dflash.lock.sig", [public]).verified
    monkeypatch.delenv("COSIGN_PASSWORD")
    monkeypatch.setenv("RELEASE_KEY_PASS", "correct horse")
    again = cli("sign", lock, "--key", private, "--passphrase-env", "RELEASE_KEY_PASS")
    assert again.exit_code == 0, again.stderr


def test_the_gate_opens_an_encrypted_key_before_any_check(cli, tmp_path, monkeypatch):
    """A key the gate could not sign with stops it at once (exit 2), not after the diff test."""
    private, _ = _encrypted_key(tmp_path, b"s3cret")
    monkeypatch.delenv("COSIGN_PASSWORD", raising=False)
    result = cli("gate", "--lock", tmp_path / "missing.lock", "--key", private,
                 "-o", tmp_path / "approval.json")
    assert result.exit_code == 2 and "set COSIGN_PASSWORD" in one_line(result.stderr)
    assert "gate ..." not in result.stderr


def test_the_gate_checks_the_lockfile_bundle_named_with_bundle(cli, locked_pair, tmp_path):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    private, public = make_key_pair(tmp_path)
    elsewhere = sign_with_key(lock, private, out=tmp_path / "lock.bundle")
    elsewhere.write_bytes(flip_signature_byte(elsewhere.read_bytes()))
    roots = ("--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}")
    result = cli("gate", "--lock", lock, "--policy", "dev", *roots, "--public-key", public,
                 "--bundle", elsewhere, "--format", "json")
    assert result.exit_code == 1, result.stdout
    row = json.loads(result.stdout)["checks"][1]
    assert row["name"] == "lockfile signature" and row["verdict"] == "refused"
    assert "lock.bundle: key.pub: the signature does not verify" in row["reason"]
