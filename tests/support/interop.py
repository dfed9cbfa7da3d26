"""Independent verifiers of dflash-guard's signatures, run by tests/interop: sigstore-js
(`@sigstore/verify`, installed by `make interop-js` from tests/interop/js/package-lock.json) and
securesystemslib's DSSE. A verifier that is not installed fails the test, never skips it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

JS = Path(__file__).resolve().parents[1] / "interop" / "js"


def sigstore_js(bundle: Path, public_key: Path, file: Path | None = None
                ) -> subprocess.CompletedProcess[str]:
    """`node verify.cjs BUNDLE KEY [FILE]`: @sigstore/verify, offline, the key as the only trust
    material (exit 0 and the verified statement as JSON, or exit 1 and why)."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: the sigstore-js interop tests need node >= 20.17",
                    pytrace=False)
    if not (JS / "node_modules" / "@sigstore" / "verify" / "package.json").is_file():
        pytest.fail(f"{JS}/node_modules lacks @sigstore/verify: run `make interop-js` (npm ci "
                    "from the package-lock.json there; `make test` does it)", pytrace=False)
    args = [node, str(JS / "verify.cjs"), str(bundle), str(public_key)]
    return subprocess.run(args + ([str(file)] if file else []), capture_output=True, text=True,
                          timeout=120, check=False)


def der_sha256(public_key: Path) -> str:
    """The sha256 (hex) of a PEM public key's DER SubjectPublicKeyInfo."""
    key = serialization.load_pem_public_key(public_key.read_bytes())
    return hashlib.sha256(key.public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
                          ).hexdigest()


def dsse_envelope(bundle: Path) -> dict[str, Any]:
    """The DSSE envelope of a bundle file, as JSON."""
    envelope: dict[str, Any] = json.loads(bundle.read_text())["dsseEnvelope"]
    return envelope


def securesystemslib_verify(bundle: Path, public_key: Path) -> bytes:
    """Verify a bundle's DSSE envelope with securesystemslib, the key's id being the sha256 of
    its DER (it matches keyids); the verified payload (raises `VerificationError`)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    key = serialization.load_pem_public_key(public_key.read_bytes())
    envelope = Envelope.from_dict(dsse_envelope(bundle))
    envelope.verify([SSlibKey.from_crypto(key, keyid=der_sha256(public_key))], 1)
    return envelope.payload


def with_payload(bundle: Path, payload: bytes, out: Path) -> Path:
    """A copy of `bundle` whose DSSE payload is `payload` (the signature left as it was)."""
    import base64

    document = json.loads(bundle.read_text())
    document["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    out.write_text(json.dumps(document))
    return out


def sign_model_signing(path: Path, private_key: Path) -> Path:
    """`path` signed as releases before issue 47 did (OpenSSF Model Signing, ECDSA key):
    `PATH.sig`, the old format that must still verify."""
    from model_signing import signing

    sig = path.with_name(path.name + ".sig")
    signing.Config().use_elliptic_key_signer(private_key=private_key).sign(path, sig)
    return sig


def validate_in_toto(payload: bytes) -> str:
    """Parse a DSSE payload as in-toto-attestation's Statement protobuf and validate it (raises
    `ValueError` or a protobuf `ParseError`); its predicate type."""
    from google.protobuf import json_format
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement

    message = json_format.Parse(payload, statement_pb2.Statement())  # type: ignore[attr-defined]
    statement = Statement.copy_from_pb(message)
    statement.validate()
    return str(statement.pb.predicate_type)
