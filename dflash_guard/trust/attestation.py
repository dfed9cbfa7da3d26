"""DSSE in-toto attestations: what a key or keyless signature of one file signs, and the key
bundles `sign --key` writes and checks (issue 47).

A file that is an in-toto Statement v1 (an approval record) is signed as itself; any other file
(a lockfile, an advisory feed) through a `signed-file/v1` statement whose one subject is its name
and sha256. A key signature is a Sigstore bundle (v0.3) with the key's hint and no log entry,
holding a DSSE envelope that securesystemslib's DSSE signs and verifies (the PAE is the
library's). A key's id, the bundle's `publicKey.hint` and the envelope's `keyid` alike, is the
sha256 of its DER SubjectPublicKeyInfo, as cosign and sigstore compute a key hint.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflash_guard import __version__
from dflash_guard.errors import InputError
from dflash_guard.fileio import read_regular
from dflash_guard.trust.intoto import PAYLOAD_TYPE, STATEMENT_V1, Statement, Subject

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec
    from securesystemslib.signer import SSlibKey

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
# The predicate of the statement a key or keyless signature of a plain file carries: its only
# subject is the file's name and sha256 (what `cosign verify-blob-attestation FILE` checks).
SIGNED_FILE_PREDICATE = "https://github.com/dflash-guard/dflash-guard/signed-file/v1"
KEY_FILE_MAX_BYTES = 64 * 1024  # a PEM key is a few hundred bytes
SIGNING_CURVES = ("secp256r1", "secp384r1")  # securesystemslib's ECDSA schemes (SHA-256, SHA-384)

Passphrase = Callable[[], str]  # asked only when the private key is encrypted


def is_statement(data: bytes) -> bool:
    """Whether `data` is an in-toto Statement v1 (such a file is signed as itself)."""
    try:
        document = json.loads(data)
    except ValueError:
        return False
    return isinstance(document, dict) and document.get("_type") == STATEMENT_V1


def attestation_payload(data: bytes, name: str) -> bytes:
    """What a signature over the file `name` with contents `data` signs: the file itself when
    it is an in-toto Statement (an approval record), else a statement whose one subject is the
    file's sha256 (a lockfile, an advisory feed)."""
    if is_statement(data):
        return data
    predicate = {"file": name, "tool": {"name": "dflash-guard", "version": __version__}}
    subject = Subject(name, {"sha256": hashlib.sha256(data).hexdigest()})
    return Statement((subject,), SIGNED_FILE_PREDICATE, predicate).dumps()


def key_id(public_key: ec.EllipticCurvePublicKey) -> str:
    """A public key's id: the sha256 (hex) of its DER SubjectPublicKeyInfo, as cosign and
    sigstore compute a key hint. It is the bundle's `publicKey.hint`, the DSSE `keyid` and the
    fingerprint `verify` prints."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER,
                                  serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def _sslib_key(public_key: ec.EllipticCurvePublicKey) -> SSlibKey:
    from securesystemslib.signer import SSlibKey

    return SSlibKey.from_crypto(public_key, keyid=key_id(public_key))


def key_bundle(payload: bytes, private_key: ec.EllipticCurvePrivateKey) -> bytes:
    """A Sigstore bundle (v0.3, key material) holding a DSSE envelope over the in-toto
    statement `payload`, signed by securesystemslib's DSSE (the PAE is the library's)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    public = private_key.public_key()
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(private_key, _sslib_key(public)))
    bundle = {"mediaType": BUNDLE_MEDIA_TYPE,
              "verificationMaterial": {"publicKey": {"hint": key_id(public)},
                                       "tlogEntries": []},
              "dsseEnvelope": envelope.to_dict()}
    return (json.dumps(bundle, indent=2) + "\n").encode()


def load_private_key(key: Path, passphrase: Passphrase | None = None
                     ) -> ec.EllipticCurvePrivateKey:
    """The EC private key in the PEM file `key`; `passphrase()` is asked for only when it is
    encrypted. Anything else (an RSA key, `/dev/zero`, a FIFO, a wrong passphrase) is one
    `InputError`, read through the bounded reader."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        pem = read_regular(key, KEY_FILE_MAX_BYTES)
    except InputError as error:
        raise InputError(f"cannot sign with --key {error}") from None
    except OSError as error:
        raise InputError(f"cannot sign with --key {key}: {error.strerror or error}") from None
    if b"SIGSTORE PRIVATE KEY" in pem:
        raise InputError(f"cannot sign with --key {key}: cosign's own encrypted key format is "
                         "not read; use a PEM (PKCS#8 or EC) private key")
    try:
        try:
            private = serialization.load_pem_private_key(pem, password=None)
        except TypeError:  # encrypted: only now is the passphrase asked for
            if passphrase is None:
                raise InputError(f"cannot sign with --key {key}: the key is encrypted and no "
                                 "passphrase was given") from None
            try:
                private = serialization.load_pem_private_key(pem, passphrase().encode())
            except (ValueError, TypeError) as error:
                raise InputError(f"cannot sign with --key {key}: an encrypted key the "
                                 f"passphrase does not open ({_first_line(error)})") from None
    except ValueError as error:
        raise InputError(f"cannot sign with --key {key}: not an unencrypted PEM private key "
                         f"({_first_line(error)})") from None
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        kind = type(private).__name__.removesuffix("PrivateKey").removeprefix("_") or "other"
        raise InputError(f"cannot sign with --key {key}: an {kind} key; an ECDSA (EC, e.g. "
                         "P-256) private key is needed")
    if private.curve.name not in SIGNING_CURVES:
        raise InputError(f"cannot sign with --key {key}: a {private.curve.name} key; P-256 or "
                         "P-384 is needed")
    return private


def public_key(key: Path) -> ec.EllipticCurvePublicKey:
    """The EC public key in a PEM file (`ValueError` when it is none)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    public = serialization.load_pem_public_key(read_regular(key, KEY_FILE_MAX_BYTES))
    if not isinstance(public, ec.EllipticCurvePublicKey):
        raise ValueError("not an ECDSA public key")
    return public


def key_signer(key: Path) -> str:
    return f"key {key.name} (sha256 {key_id(public_key(key))[:16]})"


def verify_envelope(envelope: Any, keys: Sequence[Path]) -> tuple[str | None, bytes, str]:
    """Verify a DSSE envelope with securesystemslib against each accepted key:
    (the key that verified, the in-toto payload, "") or (None, b"", why)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    try:
        parsed = Envelope.from_dict(copy.deepcopy(envelope))
    except (KeyError, TypeError, ValueError) as error:
        return None, b"", f"not a DSSE envelope: {_first_line(error)}"
    if parsed.payload_type != PAYLOAD_TYPE:
        return None, b"", f"unexpected DSSE payload type {parsed.payload_type!r}"
    reasons = []
    for key in keys:
        try:
            public = _sslib_key(public_key(key))
        except (ValueError, InputError) as error:
            reasons.append(f"{key.name}: {_first_line(error)}")
            continue
        for keyid in parsed.signatures:  # DSSE: the keyid is an unsigned hint, never what decides
            try:
                parsed.verify([SSlibKey(keyid, public.keytype, public.scheme, public.keyval)], 1)
            except VerificationError:
                continue
            return key_signer(key), parsed.payload, ""
        others = sorted(k[:16] for k in parsed.signatures if k != public.keyid)
        reasons.append(f"{key.name}: the signature does not verify with this key"
                       + (f" (signed by keyid {', '.join(others)}...)" if others else ""))
    return None, b"", "; ".join(reasons)


def coverage_problem(payload: bytes, data: bytes, name: str) -> str | None:
    """Why a verified in-toto payload does not vouch for the file `name` with contents `data`,
    or None when it does: it is the file itself (a signed statement), or a signed-file
    statement with the file's sha256 as a subject (an approval's subjects do not make it a
    signature of the lockfile)."""
    if payload == data:
        return None
    try:
        statement = Statement.loads(payload, SIGNED_FILE_PREDICATE, "a dflash-guard signature")
    except ValueError:
        if is_statement(data):
            return f"{name} has changed since it was signed (the signed statement differs)"
        return f"the signed statement is neither {name} nor a signature of a file"
    sha = hashlib.sha256(data).hexdigest()
    signed = [str(s.digest.get("sha256")) for s in statement.subjects]
    if sha in signed:
        return None
    return (f"{name} has changed since it was signed (sha256 {sha[:16]}..., signed "
            f"{', '.join(d[:16] + '...' for d in signed) or 'nothing'})")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
