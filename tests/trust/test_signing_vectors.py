"""Signatures made by other projects verify, and fail after one byte or the identity changes."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from dflash_guard.trust.policy import Identity, Signers
from dflash_guard.trust.signing import (
    production_trust_root,
    verify_blob_bundle,
    verify_dsse_bundle,
    verify_model_signature,
)
from tests.support.trust import flip_byte, flip_signature_byte, make_key_pair

GITHUB = "https://github.com/login/oauth"
BUNDLES = [
    ("bundle.txt", "bundle.txt.sigstore", "a@tny.town"),
    ("bundle_v3.txt", "bundle_v3.txt.sigstore", "william@yossarian.net"),
    ("bundle_v3_alt.txt", "bundle_v3_alt.txt.sigstore", "william@yossarian.net"),
    ("staging-rekor-v2.txt", "staging-rekor-v2.txt.sigstore.json", "jku@goto.fi"),
]
IBM = Identity("stefanb@us.ibm.com", "https://sigstore.verify.ibm.com/oauth2")


@pytest.fixture
def sigstore_dir(shared_vectors: Path) -> Path:
    return shared_vectors / "sigstore-python"


def _check(folder: Path, artifact: bytes, bundle: Path, identity: str):
    return verify_blob_bundle(artifact, bundle, [Identity(identity, GITHUB)],
                              trust_root=folder / "staging-trusted_root.json")


@pytest.mark.parametrize(("artifact", "bundle", "identity"), BUNDLES)
def test_signing_sigstore_bundle_verifies(sigstore_dir, artifact, bundle, identity):
    check = _check(sigstore_dir, (sigstore_dir / artifact).read_bytes(), sigstore_dir / bundle,
                   identity)
    assert check.ok, check.reason
    assert check.signer == f"{identity} ({GITHUB})"


@pytest.mark.parametrize(("artifact", "bundle", "identity"), BUNDLES)
def test_signing_sigstore_bundle_rejects_changed_artifact(sigstore_dir, artifact, bundle,
                                                          identity):
    data = bytearray((sigstore_dir / artifact).read_bytes())
    data[0] ^= 0x01
    check = _check(sigstore_dir, bytes(data), sigstore_dir / bundle, identity)
    assert not check.ok and "digest mismatch" in check.reason


@pytest.mark.parametrize(("artifact", "bundle", "identity"), BUNDLES)
def test_signing_sigstore_bundle_rejects_changed_bundle(sigstore_dir, tmp_path, artifact,
                                                        bundle, identity):
    tampered = tmp_path / bundle
    tampered.write_bytes(flip_signature_byte((sigstore_dir / bundle).read_bytes()))
    check = _check(sigstore_dir, (sigstore_dir / artifact).read_bytes(), tampered, identity)
    assert not check.ok and check.reason


@pytest.mark.parametrize(("artifact", "bundle", "identity"), BUNDLES)
def test_signing_sigstore_bundle_rejects_other_identity(sigstore_dir, artifact, bundle,
                                                        identity):
    data = (sigstore_dir / artifact).read_bytes()
    other = _check(sigstore_dir, data, sigstore_dir / bundle, "mallory" + identity)
    assert not other.ok and "SANs do not match" in other.reason
    issuer = verify_blob_bundle(data, sigstore_dir / bundle,
                                [Identity(identity, "https://accounts.google.com")],
                                trust_root=sigstore_dir / "staging-trusted_root.json")
    assert not issuer.ok


def test_signing_sigstore_any_accepted_identity(sigstore_dir):
    data = (sigstore_dir / "bundle.txt").read_bytes()
    accepted = [Identity("b@tny.town", GITHUB), Identity("a@tny.town", GITHUB)]
    check = verify_blob_bundle(data, sigstore_dir / "bundle.txt.sigstore", accepted,
                               trust_root=sigstore_dir / "staging-trusted_root.json")
    assert check.ok and check.signer == f"a@tny.town ({GITHUB})"
    refused = verify_blob_bundle(data, sigstore_dir / "bundle.txt.sigstore", accepted[:1],
                                 trust_root=sigstore_dir / "staging-trusted_root.json")
    assert not refused.ok


def test_signing_sigstore_no_accepted_identity_refuses(sigstore_dir):
    """Fails closed: an empty list of identities never verifies anything."""
    check = verify_blob_bundle((sigstore_dir / "bundle.txt").read_bytes(),
                               sigstore_dir / "bundle.txt.sigstore", [],
                               trust_root=sigstore_dir / "staging-trusted_root.json")
    assert not check.ok and "accepts no Sigstore identity" in check.reason


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("bundle_cve_2022_36056", "inconsistent"),
        ("bundle_invalid_version", "not a valid Sigstore bundle"),
        ("bundle_no_log_entry", "not a valid Sigstore bundle"),
    ],
)
@pytest.mark.parametrize("identity", ["a@tny.town", "william@yossarian.net"])
def test_signing_sigstore_negative_bundles_rejected(sigstore_dir, name, reason, identity):
    check = _check(sigstore_dir, (sigstore_dir / f"{name}.txt").read_bytes(),
                   sigstore_dir / f"{name}.txt.sigstore", identity)
    assert not check.ok
    if identity == "william@yossarian.net":  # the CVE bundle's own SAN: rejected all the same
        assert reason in check.reason


def test_signing_sigstore_unreadable_bundle_refuses(sigstore_dir, tmp_path):
    garbage = tmp_path / "x.sigstore.json"
    garbage.write_text("{not json")
    check = _check(sigstore_dir, b"x", garbage, "a@tny.town")
    assert not check.ok and "not a valid Sigstore bundle" in check.reason


# --- OpenSSF model signatures (model-signing v1.1.0) -----------------------------------------


def _locked(folder: Path) -> dict[str, str]:
    """What a lockfile of this folder would hold (the signed files, not the ignored one)."""
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
            for name in ("signme-1", "signme-2")}


@pytest.fixture
def ec_model(shared_vectors: Path, tmp_path: Path) -> tuple[Path, Signers]:
    folder = tmp_path / "ec"
    shutil.copytree(shared_vectors / "model-signing" / "v1.1.0-elliptic-key", folder)
    for path in folder.iterdir():
        path.chmod(0o644)
    return folder, Signers((), (shared_vectors / "model-signing" / "signing-key-pub.pem",))


@pytest.fixture
def sigstore_model(shared_vectors: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "ss"
    shutil.copytree(shared_vectors / "model-signing" / "v1.1.0-sigstore", folder)
    for path in folder.iterdir():
        path.chmod(0o644)
    return folder


def test_signing_model_sig_elliptic_key_verifies(ec_model):
    folder, signers = ec_model
    check = verify_model_signature(folder, _locked(folder), signers)
    assert check.ok, check.reason
    assert check.signer.startswith("key signing-key-pub.pem")


def test_signing_model_sig_elliptic_key_rejects_changed_file(ec_model):
    folder, signers = ec_model
    locked = _locked(folder)
    flip_byte(folder / "signme-1")
    assert not verify_model_signature(folder, locked, signers).ok
    # ...and also when the lockfile was re-made from the changed file.
    assert not verify_model_signature(folder, _locked(folder), signers).ok


def test_signing_model_sig_elliptic_key_rejects_changed_bundle(ec_model):
    folder, signers = ec_model
    sig = folder / "model.sig"
    sig.write_bytes(flip_signature_byte(sig.read_bytes()))
    assert not verify_model_signature(folder, _locked(folder), signers).ok


def test_signing_model_sig_elliptic_key_rejects_other_key(ec_model, tmp_path):
    folder, _ = ec_model
    _, other = make_key_pair(tmp_path, "other")
    check = verify_model_signature(folder, _locked(folder), Signers((), (other,)))
    assert not check.ok and "Key mismatch" in check.reason
    none = verify_model_signature(folder, _locked(folder), Signers((), ()))
    assert not none.ok and "accepts no public key" in none.reason


def test_signing_model_sig_sigstore_verifies(sigstore_model):
    check = verify_model_signature(sigstore_model, _locked(sigstore_model),
                                   Signers((IBM,), ()), trust_root=production_trust_root())
    assert check.ok, check.reason
    assert check.signer == f"{IBM.identity} ({IBM.issuer})"


def test_signing_model_sig_sigstore_rejects_changed_file(sigstore_model):
    flip_byte(sigstore_model / "signme-2")
    check = verify_model_signature(sigstore_model, _locked(sigstore_model),
                                   Signers((IBM,), ()), trust_root=production_trust_root())
    assert not check.ok and "signme-2: signed sha256" in check.reason


def test_signing_model_sig_sigstore_rejects_changed_bundle(sigstore_model):
    sig = sigstore_model / "model.sig"
    sig.write_bytes(flip_signature_byte(sig.read_bytes()))
    check = verify_model_signature(sigstore_model, _locked(sigstore_model),
                                   Signers((IBM,), ()), trust_root=production_trust_root())
    assert not check.ok


def test_signing_model_sig_sigstore_rejects_other_identity(sigstore_model):
    other = Identity("mallory@us.ibm.com", IBM.issuer)
    check = verify_model_signature(sigstore_model, _locked(sigstore_model),
                                   Signers((other,), ()), trust_root=production_trust_root())
    assert not check.ok and "SANs do not match" in check.reason


def test_signing_model_sig_must_cover_every_locked_file(sigstore_model):
    locked = _locked(sigstore_model)
    extra = {**locked, "ignore-me": hashlib.sha256(b"").hexdigest()}
    check = verify_model_signature(sigstore_model, extra, Signers((IBM,), ()),
                                   trust_root=production_trust_root())
    assert not check.ok and "ignore-me: locked but not covered" in check.reason
    fewer = {"signme-1": locked["signme-1"]}
    check = verify_model_signature(sigstore_model, fewer, Signers((IBM,), ()),
                                   trust_root=production_trust_root())
    assert not check.ok and "signme-2: signed but not in the lockfile" in check.reason


def test_signing_dsse_bundle_binds_the_exact_statement(sigstore_model):
    """A Sigstore DSSE bundle verifies only for the very statement bytes it signed."""
    import base64
    import json

    sig = sigstore_model / "model.sig"
    payload = base64.b64decode(json.loads(sig.read_text())["dsseEnvelope"]["payload"])
    root = production_trust_root()
    assert verify_dsse_bundle(payload, sig, [IBM], trust_root=root).ok
    changed = verify_dsse_bundle(payload.replace(b"signme-1", b"signme-3"), sig, [IBM],
                                 trust_root=root)
    assert not changed.ok and "not this record" in changed.reason
    other = verify_dsse_bundle(payload, sig, [Identity("eve@us.ibm.com", IBM.issuer)],
                               trust_root=root)
    assert not other.ok
