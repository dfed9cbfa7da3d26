"""Signatures: Sigstore and key bundles over one file, OpenSSF model signatures, offline keys.

Each kind is made and checked by a library, never by hand:
- `FILE.sigstore.json` (keyless, `sigstore`) and `FILE.sig` (an ECDSA key, securesystemslib's
  DSSE): a DSSE in-toto attestation about one file, the lockfile or an approval record
  (`trust.attestation` says what is signed). The Sigstore ones are verified against the policy's
  identity/issuer pairs (exact, or an anchored regexp), online (`Verifier.production()`) or
  offline with a trusted root file; the key ones against its public keys. Signatures of earlier
  releases still verify: a message signature over the lockfile bytes (`verify_artifact`) and an
  OpenSSF Model Signing key bundle (`model_signing`'s elliptic key verifier).
- `model.sig` in a model folder: an OpenSSF Model Signing bundle whose DSSE payload is an in-toto
  statement listing each file's sha256. A certificate-signed one is verified with `sigstore`
  (`verify_dsse` with the policy's identities); a key-signed one with `model_signing`'s elliptic
  key verifier. Either way its per-file digests must then equal the lockfile's.

Checking a signature never raises for a bad signature: it returns a `SignatureCheck` whose
`Outcome` is a refusal with the reason (a finding). Only what prevents the check (an unreadable
trust root) raises `InputError`.

The module is over 450 lines on purpose: the kinds share one verification path (identity
policies, trust root, key loading, the outcome), and keeping them together keeps that path single.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflash_guard.errors import InputError
from dflash_guard.fileio import create_exclusive, loads_json, read_input, write_atomic
from dflash_guard.outcome import Outcome, Verdict
from dflash_guard.schema import MAX_DOCUMENT_CHARS
from dflash_guard.trust.attestation import (
    Passphrase,
    attestation_payload,
    coverage_problem,
    key_bundle,
    key_signer,
    load_private_key,
    verify_envelope,
)
from dflash_guard.trust.intoto import PAYLOAD_TYPE, Statement
from dflash_guard.trust.policy import Identity, Policy, Signers

if TYPE_CHECKING:
    from sigstore.models import Bundle
    from sigstore.oidc import IdentityToken
    from sigstore.verify import Verifier
    from sigstore.verify.policy import VerificationPolicy

    from dflash_guard.pins.lockfile import Lockfile

SIGSTORE_SUFFIX = ".sigstore.json"
KEY_SIG_SUFFIX = ".sig"
MODEL_SIG = "model.sig"
MODEL_SIGNING_PREDICATE = "https://model_signing/signature/v1.0"
# A Sigstore bundle or an OpenSSF signature is a few KB; a model signature lists every file.
SIGNATURE_MAX_BYTES = 64 * 1024 * 1024
# Files a model signature need not cover: git metadata model_signing ignores by default.
UNSIGNED_METADATA = (".gitattributes", ".gitignore")
UNSIGNED_METADATA_DIRS = (".git/", ".github/")


@dataclasses.dataclass(frozen=True)
class SignatureCheck:
    """The outcome of checking one signature (`subject`'s `signature` file): who signed it, or
    why it was refused."""

    subject: str
    signature: str
    outcome: Outcome
    signer: str | None = None

    @classmethod
    def good(cls, subject: str, signature: str, signer: str) -> SignatureCheck:
        return cls(subject, signature, Outcome.passed(f"signed by {signer}"), signer)

    @classmethod
    def bad(cls, subject: str, signature: str, reason: str,
            signer: str | None = None) -> SignatureCheck:
        return cls(subject, signature, Outcome.refused(reason), signer)

    @property
    def ok(self) -> bool:
        """It does not block: it verified, or nothing was asked to check it (`unchecked`)."""
        return self.outcome.ok

    @property
    def verified(self) -> bool:
        """An accepted signer's signature verified: the only state that is evidence."""
        return self.outcome.verdict is Verdict.passed

    @property
    def unchecked(self) -> bool:
        return self.outcome.verdict is Verdict.skipped

    @property
    def reason(self) -> str:
        """Why it was refused ("" when it verified)."""
        return "" if self.verified else self.outcome.reason

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "signature": self.signature, "passed": self.ok,
                "verdict": str(self.outcome.verdict),
                "signer": self.signer, "reason": self.reason}


# --- trust -----------------------------------------------------------------------------------


def sigstore_verifier(trust_root: Path | None = None) -> Verifier:
    """A Sigstore verifier: offline from a trusted root file, else the production instance."""
    from sigstore.models import TrustedRoot
    from sigstore.verify import Verifier

    if trust_root is None:
        try:
            return Verifier.production()
        except Exception as error:  # noqa: BLE001 - TUF refresh fails in many ways, all "offline"
            raise InputError(
                f"cannot fetch Sigstore's trust root ({type(error).__name__}: {error}); "
                "pass --trust-root FILE to verify offline"
            ) from None
    try:
        return Verifier(trusted_root=TrustedRoot.from_file(str(trust_root)))
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read trusted root {trust_root}: {error}") from None


def production_trust_root() -> Path:
    """The production trusted root shipped inside the `sigstore` package (for offline checks)."""
    import sigstore

    path = (
        Path(sigstore.__file__).parent / "_store" / "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev"
        / "trusted_root.json"
    )
    if not path.is_file():
        raise InputError(f"the sigstore package ships no production trusted root at {path}")
    return path


# The Fulcio "other name" SAN of some identities (sigstore's `policy.Identity` reads it too).
_OTHERNAME_OID = "1.3.6.1.4.1.57264.1.7"


class _IdentityPattern:
    """sigstore's `policy.Identity`, the certificate's SAN matched by a regular expression
    (whole-string: an anchored `--certificate-identity-regexp`) instead of exactly."""

    def __init__(self, pattern: str, issuer: str) -> None:
        from sigstore.verify import policy

        self._pattern = re.compile(pattern)
        self._issuer = policy.OIDCIssuer(issuer)

    def verify(self, cert: Any) -> None:
        from cryptography import x509
        from sigstore.errors import VerificationError

        self._issuer.verify(cert)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = [*names.get_values_for_type(x509.RFC822Name),
                *names.get_values_for_type(x509.UniformResourceIdentifier),
                *(o.value.decode() for o in names.get_values_for_type(x509.OtherName)
                  if o.type_id.dotted_string == _OTHERNAME_OID)]
        if not any(self._pattern.fullmatch(san) for san in sans):
            raise VerificationError(f"Certificate's SANs do not match /{self._pattern.pattern}/;"
                                    f" actual SANs: {sans}")


def _one_policy(identity: Identity) -> VerificationPolicy:
    from sigstore.verify import policy

    if identity.regexp:
        return _IdentityPattern(identity.identity, identity.issuer)
    return policy.Identity(identity=identity.identity, issuer=identity.issuer)


def _identity_policy(identities: Sequence[Identity]) -> VerificationPolicy:
    from sigstore.verify import policy

    if len(identities) == 1:
        return _one_policy(identities[0])
    # AnyOf refuses an empty list by itself; callers never pass one (see _no_signer_reason).
    return policy.AnyOf([_one_policy(i) for i in identities])


def _describe(identities: Sequence[Identity]) -> str:
    return ", ".join(str(i) for i in identities)


def _load_bundle(path: Path) -> tuple[Bundle | None, str]:
    """A Sigstore bundle, or the reason it cannot be one (a refusal, not an input error)."""
    from sigstore.models import Bundle

    try:
        return Bundle.from_json(read_input(path, "signature", SIGNATURE_MAX_BYTES)), ""
    except InputError as error:
        return None, str(error)
    except Exception as error:  # noqa: BLE001 - InvalidBundle, pydantic and JSON errors alike
        return None, f"not a valid Sigstore bundle: {_first_line(error)}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


# --- blobs (the lockfile) --------------------------------------------------------------------


def _verify_sigstore(
    bundle_path: Path, identities: Sequence[Identity], trust_root: Path | None,
    *, data: bytes | None = None,
) -> tuple[Any, tuple[str, bytes] | None, str]:
    """Verify a Sigstore bundle against any accepted identity: over `data` (a blob), else as DSSE.

    Returns (bundle, (payload type, payload) for DSSE, "") or (None, None, why it is refused).
    """
    from sigstore.errors import Error as SigstoreError

    if not identities:
        return None, None, "the policy accepts no Sigstore identity for it"
    bundle, problem = _load_bundle(bundle_path)
    if bundle is None:
        return None, None, problem
    verifier, accepted = sigstore_verifier(trust_root), _identity_policy(identities)
    try:
        if data is not None:
            verifier.verify_artifact(data, bundle, accepted)
            return bundle, None, ""
        return bundle, verifier.verify_dsse(bundle, accepted), ""
    except SigstoreError as error:
        return None, None, _refusal(error, identities)


def verify_blob_bundle(
    data: bytes,
    bundle_path: Path,
    identities: Sequence[Identity],
    *,
    trust_root: Path | None = None,
    subject: str = "artifact",
) -> SignatureCheck:
    """Check a Sigstore bundle over the file `data` against any of the accepted identities: a
    DSSE attestation that covers it (`covers`), or a message signature over its bytes (what
    releases before 0.2 wrote for a lockfile)."""
    dsse = _has_dsse(bundle_path)
    bundle, signed, reason = _verify_sigstore(bundle_path, identities, trust_root,
                                              data=None if dsse else data)
    if bundle is None:
        return SignatureCheck.bad(subject, str(bundle_path), reason)
    if dsse:
        payload_type, payload = signed or ("", b"")
        problem = (f"unexpected DSSE payload type {payload_type!r}" if payload_type != PAYLOAD_TYPE
                   else coverage_problem(payload, data, subject))
        if problem:
            return SignatureCheck.bad(subject, str(bundle_path), problem)
    return SignatureCheck.good(subject, str(bundle_path), _signer_of(bundle, identities))


def _has_dsse(bundle_path: Path) -> bool:
    """Whether a bundle file holds a DSSE envelope (unreadable: False, and the check refuses)."""
    try:
        raw = loads_json(read_input(bundle_path, "signature", SIGNATURE_MAX_BYTES),
                         str(bundle_path))
    except InputError:
        return False
    return isinstance(raw, dict) and "dsseEnvelope" in raw


def is_key_bundle(bundle_path: Path) -> bool:
    """Whether a bundle file names a public key (a key signature) rather than a certificate."""
    try:
        raw: Any = loads_json(read_input(bundle_path, "signature", SIGNATURE_MAX_BYTES),
                              str(bundle_path))
        return "publicKey" in raw["verificationMaterial"]
    except (InputError, KeyError, TypeError):
        return False


def verify_bundle(path: Path, bundle: Path, signers: Signers, *,
                  trust_root: Path | None = None) -> SignatureCheck:
    """Check a bundle given by name (`--bundle FILE`) over the file `path`: a key signature or
    a Sigstore one, told apart by its verification material."""
    if is_key_bundle(bundle):
        return verify_key_signature(path, bundle, signers.public_keys, subject=path.name)
    data = read_input(path, "signed file", MAX_DOCUMENT_CHARS)
    return verify_blob_bundle(data, bundle, signers.identities, trust_root=trust_root,
                              subject=path.name)


def _refusal(error: BaseException, identities: Sequence[Identity]) -> str:
    message = _first_line(error)
    if "policies succeeded" in message:
        return f"signed by none of the accepted identities: {_describe(identities)}"
    return message


def _signer_of(bundle: Bundle, identities: Sequence[Identity]) -> str:
    """Which accepted identity the verified bundle's certificate carries."""
    from sigstore.errors import VerificationError

    cert = bundle.signing_certificate
    for identity in identities:
        try:
            _identity_policy([identity]).verify(cert)
        except VerificationError:
            continue
        return str(identity)
    return "an accepted identity"


# --- key-based (air-gapped) ------------------------------------------------------------------

def sign_with_key(path: Path, key: Path, *, out: Path | None = None,
                  passphrase: Passphrase | None = None) -> Path:
    """Sign one file with an ECDSA private key (PEM, encrypted or not): write `FILE.sig`, a
    Sigstore bundle whose DSSE payload is the file's in-toto statement (`attestation_payload`)."""
    out = out or path.with_name(path.name + KEY_SIG_SUFFIX)
    if not path.is_file():
        raise InputError(f"cannot sign {path}: no such file")
    private = load_private_key(key, passphrase)
    data = read_input(path, "file to sign", SIGNATURE_MAX_BYTES)
    write_atomic(out, key_bundle(attestation_payload(data, path.name), private))
    return out


def check_ec_private_key(key: Path, passphrase: Passphrase | None = None) -> None:
    """Refuse, as one `InputError`, a key file `sign_with_key` could not sign with (before any
    work is done)."""
    load_private_key(key, passphrase)


@contextlib.contextmanager
def bounded_copy(sig: Path) -> Iterator[Path]:
    """A private copy of a signature file, read once through the bounded reader (a link to
    `/dev/zero`, a FIFO or a huge file is an `InputError`), for a library that reads a path."""
    data = read_input(sig, "signature", SIGNATURE_MAX_BYTES)
    private = Path(tempfile.mkdtemp(prefix="dflash-guard-sig-"))
    try:
        copy = private / sig.name
        with open(create_exclusive(copy), "wb") as handle:
            handle.write(data)
        yield copy
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _verify_with_keys(target: Path, sig: Path, keys: Sequence[Path]) -> tuple[str | None, str]:
    """Verify an OpenSSF key signature over `target` (file or folder): (key that verified, why)."""
    if not keys:
        return None, "the policy accepts no public key for it (signatures: ... public_keys)"
    try:
        with bounded_copy(sig) as copy:
            return _verify_copy(target, copy, keys)
    except InputError as error:
        return None, str(error)


def _verify_copy(target: Path, sig: Path, keys: Sequence[Path]) -> tuple[str | None, str]:
    from model_signing import verifying

    reasons = []
    for key in keys:
        try:
            config = verifying.Config()  # type: ignore[no-untyped-call]  # untyped __init__
            config.use_elliptic_key_verifier(public_key=key).verify(target, sig)
        except Exception as error:  # noqa: BLE001 - model_signing raises ValueError, KeyError,
            # InvalidSignature, protobuf errors...: any failure means "not verified"
            reasons.append(f"{key.name}: {_first_line(error)}")
            continue
        return key_signer(key), ""
    return None, "; ".join(reasons)


def _dsse_envelope(bundle: Any) -> Any:
    """The bundle's DSSE envelope (`KeyError`/`TypeError` when it has none)."""
    envelope = bundle["dsseEnvelope"]
    if not isinstance(envelope, dict):
        raise TypeError("dsseEnvelope: expected an object")
    return envelope


def _is_model_signing(bundle: Any) -> bool:
    """Whether a key bundle is an OpenSSF Model Signing signature (the format releases before
    0.2 wrote, still verified with `model_signing`)."""
    try:
        payload = base64.b64decode(_dsse_envelope(bundle)["payload"], validate=True)
        return bool(json.loads(payload).get("predicateType") == MODEL_SIGNING_PREDICATE)
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def verify_key_signature(path: Path, sig: Path, keys: Sequence[Path],
                         *, subject: str = "artifact") -> SignatureCheck:
    """Check `FILE.sig`, a key-signed Sigstore bundle over one file, against accepted keys: a
    DSSE attestation (`sign_with_key`), or an OpenSSF Model Signing one (earlier releases)."""
    if not keys:
        return SignatureCheck.bad(subject, str(sig), "the policy accepts no public key for it "
                                  "(signatures: ... public_keys)")
    try:
        bundle = loads_json(read_input(sig, "signature", SIGNATURE_MAX_BYTES), str(sig))
        if _is_model_signing(bundle):
            signer, reason = _verify_with_keys(path, sig, keys)
        else:
            signer, payload, reason = verify_envelope(_dsse_envelope(bundle), keys)
            problem = None if signer is None else coverage_problem(
                payload, read_input(path, "signed file", SIGNATURE_MAX_BYTES), path.name)
            if problem:
                signer, reason = None, problem
    except InputError as error:
        signer, reason = None, str(error)
    except (KeyError, TypeError) as error:
        signer, reason = None, f"not a DSSE bundle: {_first_line(error)}"
    if signer is None:
        return SignatureCheck.bad(subject, str(sig), reason)
    return SignatureCheck.good(subject, str(sig), signer)


# --- the lockfile ----------------------------------------------------------------------------


def lock_signature_paths(lock_path: Path) -> tuple[Path, Path]:
    """Where a lockfile's signatures live: `LOCK.sigstore.json` (keyless) and `LOCK.sig` (key)."""
    return (lock_path.with_name(lock_path.name + SIGSTORE_SUFFIX),
            lock_path.with_name(lock_path.name + KEY_SIG_SUFFIX))


def verify_lockfile_signature(
    lock_path: Path, signers: Signers, *, required: bool, trust_root: Path | None = None,
    bundle_file: Path | None = None,
) -> list[SignatureCheck]:
    """Check every signature next to the lockfile, or only `bundle_file` when one is named
    (`--bundle`: it must verify); none present is a refusal when `required`."""
    if bundle_file is not None:
        return [verify_bundle(lock_path, bundle_file, signers, trust_root=trust_root)]
    bundle, keysig = lock_signature_paths(lock_path)
    present = [p for p in (bundle, keysig) if p.exists() or p.is_symlink()]
    if present and signers.empty and not required:  # nobody was asked to check it
        return [SignatureCheck(lock_path.name, str(p), Outcome.skipped(
            "present but unchecked: no accepted lockfile signer is configured (pass "
            "--public-key KEY or --identity/--issuer, or list it under signatures.lockfile in "
            "--policy FILE)")) for p in present]
    checks = []
    if bundle.exists() or bundle.is_symlink():
        data = read_input(lock_path, "lockfile", MAX_DOCUMENT_CHARS)
        checks.append(verify_blob_bundle(data, bundle, signers.identities,
                                         trust_root=trust_root, subject=lock_path.name))
    if keysig.exists() or keysig.is_symlink():
        checks.append(verify_key_signature(lock_path, keysig, signers.public_keys,
                                           subject=lock_path.name))
    if not checks and required:
        checks.append(SignatureCheck.bad(lock_path.name, str(bundle),
                                         "the policy requires a signed lockfile; none found "
                                         f"(looked for {keysig.name} and {bundle.name})"))
    return checks


def verify_file_signatures(path: Path, signers: Signers, *, trust_root: Path | None = None
                           ) -> list[SignatureCheck]:
    """Every signature beside a file (`FILE.sig`, `FILE.sigstore.json` over its bytes) checked
    against `signers`; none at all is one refusal ("not signed")."""
    bundle, keysig = lock_signature_paths(path)
    checks = []
    if bundle.exists() or bundle.is_symlink():
        data = read_input(path, "signed file", MAX_DOCUMENT_CHARS)
        checks.append(verify_blob_bundle(data, bundle, signers.identities,
                                         trust_root=trust_root, subject=path.name))
    if keysig.exists() or keysig.is_symlink():
        checks.append(verify_key_signature(path, keysig, signers.public_keys, subject=path.name))
    if not checks:
        checks.append(SignatureCheck.bad(path.name, str(keysig), "not signed"))
    return checks


# --- model signatures (OpenSSF Model Signing) ------------------------------------------------


def signed_file_digests(sig: Path) -> dict[str, str]:
    """The per-file sha256 digests of a model signature's in-toto payload (not yet verified)."""
    try:
        bundle: Any = loads_json(read_input(sig, "model signature", SIGNATURE_MAX_BYTES),
                                 str(sig))
        payload = base64.b64decode(bundle["dsseEnvelope"]["payload"], validate=True)
    except (InputError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"no DSSE payload: {_first_line(error)}") from None
    return _statement_digests(payload)


def _statement_digests(payload: bytes) -> dict[str, str]:
    statement = Statement.loads(payload, MODEL_SIGNING_PREDICATE, "a model signature")
    digests = {}
    for resource in statement.predicate["resources"]:
        if resource.get("algorithm") != "sha256":
            raise ValueError(f"{resource.get('name')}: algorithm {resource.get('algorithm')!r}"
                             " is not sha256: cannot compare with the lockfile")
        digests[str(resource["name"])] = str(resource["digest"])
    return digests


def _needs_signature(path: str, sig_name: str) -> bool:
    if path == sig_name or path in UNSIGNED_METADATA:
        return False
    return not path.startswith(UNSIGNED_METADATA_DIRS)


def compare_digests(signed: Mapping[str, str], locked: Mapping[str, str],
                    sig_name: str = MODEL_SIG) -> list[str]:
    """Every locked file must be signed with the same sha256, and nothing else signed."""
    problems = []
    for path, sha in sorted(locked.items()):
        if not _needs_signature(path, sig_name):
            continue
        if path not in signed:
            problems.append(f"{path}: locked but not covered by the signature")
        elif signed[path] != sha:
            problems.append(f"{path}: signed sha256 {signed[path][:16]}... but locked "
                            f"{sha[:16]}...")
    for path in sorted(set(signed) - set(locked)):
        problems.append(f"{path}: signed but not in the lockfile")
    return problems


def verify_model_signature(
    model_dir: Path,
    locked: Mapping[str, str],
    signers: Signers,
    *,
    trust_root: Path | None = None,
    sig_name: str = MODEL_SIG,
    subject: str = "model",
) -> SignatureCheck:
    """Check `model_dir/model.sig` against the accepted signers and the locked file digests.

    `locked` maps each locked file's path (relative to the folder) to its sha256.
    """
    sig = model_dir / sig_name
    name = str(sig)
    try:
        raw: Any = loads_json(read_input(sig, "model signature", SIGNATURE_MAX_BYTES), str(sig))
        material = raw["verificationMaterial"]
    except (InputError, KeyError, TypeError) as error:
        return SignatureCheck.bad(subject, name,
                                  f"not a model signature: {_first_line(error)}")
    if "publicKey" in material:
        signer, reason = _verify_with_keys(model_dir, sig, signers.public_keys)
        if signer is None:
            return SignatureCheck.bad(subject, name, reason)
        try:
            signed = signed_file_digests(sig)
        except ValueError as error:
            return SignatureCheck.bad(subject, name, str(error))
    else:
        signer, signed, reason = _verify_sigstore_dsse(sig, signers.identities, trust_root)
        if signer is None:
            return SignatureCheck.bad(subject, name, reason)
    problems = compare_digests(signed, locked, sig_name)
    if problems:
        return SignatureCheck.bad(subject, name,
                                  "; ".join(problems[:5]) + (" ..." if problems[5:] else ""),
                                  signer=signer)
    return SignatureCheck.good(subject, name, signer)


def verify_dsse_bundle(
    payload: bytes,
    bundle_path: Path,
    identities: Sequence[Identity],
    *,
    trust_root: Path | None = None,
    subject: str = "statement",
) -> SignatureCheck:
    """Check a Sigstore DSSE bundle whose in-toto statement must be exactly `payload`."""
    name = str(bundle_path)
    bundle, signed, reason = _verify_sigstore(bundle_path, identities, trust_root)
    if bundle is None:
        return SignatureCheck.bad(subject, name, reason)
    if signed != (PAYLOAD_TYPE, payload):
        return SignatureCheck.bad(subject, name, "the signed statement is not this record")
    return SignatureCheck.good(subject, name, _signer_of(bundle, identities))


def _verify_sigstore_dsse(
    sig: Path, identities: Sequence[Identity], trust_root: Path | None
) -> tuple[str | None, dict[str, str], str]:
    if not identities:
        return None, {}, "the policy accepts no Sigstore identity for model signatures"
    bundle, signed, reason = _verify_sigstore(sig, identities, trust_root)
    if bundle is None or signed is None:
        return None, {}, reason
    payload_type, payload = signed
    if payload_type != PAYLOAD_TYPE:
        return None, {}, f"unexpected DSSE payload type {payload_type!r}"
    try:
        digests = _statement_digests(payload)
    except (ValueError, KeyError, TypeError) as error:
        return None, {}, f"bad in-toto payload: {_first_line(error)}"
    return _signer_of(bundle, identities), digests, ""


# --- keyless signing -------------------------------------------------------------------------


def identity_token(interactive: bool) -> IdentityToken:
    """An OIDC token: ambient CI credentials first, else the browser flow when interactive.

    Raises `InputError` when there is none, so a caller can ask before doing any work.
    """
    from sigstore.oidc import IdentityError, IdentityToken, Issuer, detect_credential

    try:
        raw = detect_credential()
    except IdentityError as error:
        raise InputError(f"ambient OIDC credential found but unusable: {error}") from None
    if raw:
        return IdentityToken(raw)
    if not interactive:
        raise InputError(
            "no ambient OIDC credential found (in GitHub Actions grant `id-token: write`); "
            "run interactively to sign in through a browser, or sign with --key KEY"
        )
    from sigstore.models import ClientTrustConfig

    try:
        issuer = Issuer(ClientTrustConfig.production().signing_config.get_oidc_url())
        return issuer.identity_token()
    except IdentityError as error:
        raise InputError(f"sign-in failed: {error}") from None
    except Exception as error:  # noqa: BLE001 - TUF and HTTP failures: the network, not a bug
        raise InputError(f"sign-in failed ({type(error).__name__}: {_first_line(error)})"
                         ) from None


def sign_keyless(path: Path, *, interactive: bool = False, token: IdentityToken | None = None,
                 out: Path | None = None) -> Path:
    """Sign `path` with Sigstore (keyless) and write `PATH.sigstore.json`: a DSSE bundle over
    the file's in-toto statement (`attestation_payload`: the file itself when it is one, as an
    approval record is).

    `token` is an identity token from `identity_token` (else one is obtained here).
    """
    from sigstore.dsse import Statement as DsseStatement
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import ClientTrustConfig
    from sigstore.sign import SigningContext

    out = out or path.with_name(path.name + SIGSTORE_SUFFIX)
    if not path.is_file():
        raise InputError(f"cannot sign {path}: no such file")
    payload = attestation_payload(read_input(path, "file to sign", SIGNATURE_MAX_BYTES),
                                  path.name)
    token = token or identity_token(interactive)
    try:
        context = SigningContext.from_trust_config(ClientTrustConfig.production())
        with context.signer(token) as signer:
            bundle = signer.sign_dsse(DsseStatement(payload))
    except SigstoreError as error:
        raise InputError(f"Sigstore signing failed: {error.diagnostics()}") from None
    except Exception as error:  # noqa: BLE001 - TUF and HTTP failures: the network, not a bug
        raise InputError(f"Sigstore signing failed ({type(error).__name__}: "
                         f"{_first_line(error)}); sign with --key KEY offline") from None
    write_atomic(out, bundle.to_json())
    return out


# --- every signature of a deploy -------------------------------------------------------------


def verify_model_signatures(lock: Lockfile, locations: Mapping[str, Path], policy: Policy,
                            *, trust_root: Path | None = None,
                            provenance_trusted: bool = True) -> list[SignatureCheck]:
    """Check the `model.sig` of every verified folder; a missing one where the tier requires it
    is a refusal. `lock` is a `dflash_guard.pins.lockfile.Lockfile`; `provenance_trusted`: whether
    its `hub-confirmed` claims count (see `trust.evidence`)."""
    checks = []
    for artifact in lock.deployed:
        folder = locations.get(artifact.role)
        if folder is None:
            continue
        tier = policy.artifact_tier(artifact, provenance_trusted)
        if not (folder / MODEL_SIG).is_file():
            if policy.rule(tier).signature_required:
                checks.append(SignatureCheck.bad(artifact.role, str(folder / MODEL_SIG),
                                                 f"missing, and the {tier} tier requires one"))
            continue
        checks.append(verify_model_signature(
            folder, {f.path: f.sha256 for f in artifact.files}, policy.model_signers,
            trust_root=trust_root, subject=artifact.role,
        ))
    return checks


def verify_signatures(lock_path: Path, lock: Lockfile, locations: Mapping[str, Path],
                      policy: Policy, *, trust_root: Path | None = None,
                      bundle_file: Path | None = None) -> list[SignatureCheck]:
    """Every signature check of `dflash-guard verify`: the lockfile's (when one exists or the
    policy requires it; `bundle_file`: that one) and each verified folder's `model.sig` (when
    present or required)."""
    checks = verify_lockfile_signature(lock_path, policy.lockfile_signers,
                                       required=policy.lockfile_signature_required,
                                       trust_root=trust_root, bundle_file=bundle_file)
    trusted = bool(checks) and all(c.verified for c in checks)  # hub-confirmed counts when signed
    return checks + verify_model_signatures(lock, locations, policy, trust_root=trust_root,
                                            provenance_trusted=trusted)
