"""The CMS (PKCS#7) signature over a code directory, and its signer's certificate chain.

asn1crypto parses the SignedData (cryptography reads certificates out of PKCS#7 but neither
parses nor verifies a SignerInfo); cryptography verifies the signature and each link of the
chain. The chain is walked here, not with cryptography's `x509.verification`: that verifier
refuses any critical extension it does not know, and every Developer ID Application
certificate carries Apple's critical marker 1.2.840.113635.100.6.1.13.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import warnings
from collections.abc import Sequence
from typing import Any, TypeVar

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dflash_guard.trust.apple.udif import SignatureError

DEVELOPER_ID_APPLICATION = x509.ObjectIdentifier("1.2.840.113635.100.6.1.13")
DEVELOPER_ID_CA = x509.ObjectIdentifier("1.2.840.113635.100.6.2.6")
CDHASHES_PLIST = "1.2.840.113635.100.9.1"
CDHASHES_DIGESTS = "1.2.840.113635.100.9.2"
TIMESTAMP_TOKEN = "1.2.840.113549.1.9.16.2.14"  # an unsigned attribute: Apple's TSA's token
CONTENT_TYPE = "1.2.840.113549.1.9.3"
MESSAGE_DIGEST = "1.2.840.113549.1.9.4"
SIGNING_TIME = "1.2.840.113549.1.9.5"
CONTENT_DATA = "1.2.840.113549.1.7.1"
T = TypeVar("T", bound=x509.ExtensionType)
_DER = Encoding.DER
MAX_CHAIN = 6
DIGESTS: dict[str, hashes.HashAlgorithm] = {"sha256": hashes.SHA256(), "sha384": hashes.SHA384(),
                                           "sha512": hashes.SHA512()}
OID_DIGESTS = {"2.16.840.1.101.3.4.2.1": "sha256", "2.16.840.1.101.3.4.2.2": "sha384",
               "2.16.840.1.101.3.4.2.3": "sha512", "1.3.14.3.2.26": "sha1"}


@dataclasses.dataclass(frozen=True)
class SignedCms:
    """A verified CMS signature: its signer, the certificates it carried, what it signed."""

    signer: x509.Certificate
    certificates: tuple[x509.Certificate, ...]
    signing_time: dt.datetime | None
    digest_name: str
    signed_digest: bytes  # messageDigest: the primary code directory's digest
    bound_cdhashes: frozenset[tuple[str, bytes]]  # (hash name, full digest) of 100.9.2
    signature: bytes = b""  # the signature value (what a timestamp token is over)
    timestamp_token: Any = None  # the RFC 3161 token beside it (asn1crypto ContentInfo)


@dataclasses.dataclass(frozen=True)
class CheckedSigner:
    """The one signer of a SignedData, checked: its certificate and signed attributes."""

    signer: x509.Certificate
    certificates: tuple[x509.Certificate, ...]
    attributes: dict[str, Any]  # signed attribute OID -> its values
    digest_name: str
    signer_info: Any  # asn1crypto SignerInfo


def verify_cms(der: bytes, content: bytes) -> SignedCms:
    """Check the detached CMS signature `der` over `content` (the primary code directory):
    one signer, its certificate inside, signed attributes whose messageDigest is `content`'s
    digest, and the signer's key verifying them."""
    from asn1crypto import cms

    if not der:
        raise SignatureError("the signature slot is empty: an ad-hoc signature, no signer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        try:
            info = cms.ContentInfo.load(der, strict=True)
            if info["content_type"].native != "signed_data":
                raise SignatureError("the CMS blob is not SignedData")
            signed = info["content"]
            if signed["encap_content_info"]["content"].native is not None:
                raise SignatureError("the CMS signature embeds content instead of signing the "
                                     "code directory")
        except SignatureError:
            raise
        except Exception as error:  # asn1crypto raises ValueError, TypeError, ... on bad DER
            raise SignatureError(f"the CMS signature does not parse: {str(error)[:200]}") \
                from None
        checked = check_signed_data(signed, content, CONTENT_DATA, "the CMS signature",
                                    "code directory")
        try:
            signing_time = checked.attributes.get(SIGNING_TIME)
            when = signing_time[0].native if signing_time else None
            bound = _cdhash_digests(checked.attributes.get(CDHASHES_DIGESTS))
            unsigned = checked.signer_info["unsigned_attrs"]
            tokens = [a["values"][0] for a in unsigned if a["type"].dotted == TIMESTAMP_TOKEN] \
                if isinstance(unsigned, cms.CMSAttributes) else []
            signature = checked.signer_info["signature"].native
        except Exception as error:
            raise SignatureError(f"the CMS signature does not parse: {str(error)[:200]}") \
                from None
    if len(tokens) > 1:
        raise SignatureError("the CMS signature carries more than one timestamp token")
    return SignedCms(checked.signer, checked.certificates, when, checked.digest_name,
                     bytes(checked.attributes[MESSAGE_DIGEST][0].native), bound, signature,
                     tokens[0] if tokens else None)


def check_signed_data(signed: Any, content: bytes, content_type: str, what: str,
                      signs: str) -> CheckedSigner:
    """Check the one signer of the asn1crypto SignedData `signed` over `content`: its
    certificate among those carried, the content type and messageDigest attributes, and its
    signature over the attributes. `what` names the structure in refusals, `signs` what its
    content is."""
    try:
        if len(signed["signer_infos"]) != 1:
            raise SignatureError(f"{what} has {len(signed['signer_infos'])} signers, not one")
        signer_info = signed["signer_infos"][0]
        certificates = tuple(x509.load_der_x509_certificate(c.chosen.dump())
                             for c in signed["certificates"] or ()
                             if c.name == "certificate")
        signer = _signer(signer_info["sid"], certificates, what)
        digest_name = signer_info["digest_algorithm"]["algorithm"].native
        algorithm = signer_info["signature_algorithm"].signature_algo
        attributes = signer_info["signed_attrs"]
        if not attributes:
            raise SignatureError(f"{what} has no signed attributes")
        values = {a["type"].dotted: a["values"] for a in attributes}
        message_digest = values.get(MESSAGE_DIGEST)
        kind = values.get(CONTENT_TYPE)
        signed_digest = bytes(message_digest[0].native) if message_digest else b""
        kind_oid = kind[0].dotted if kind else None
        to_verify = b"\x31" + attributes.dump()[1:]  # signed as a SET OF, tagged [0] here
        signature = signer_info["signature"].native
    except SignatureError:
        raise
    except Exception as error:  # asn1crypto raises ValueError, TypeError, ... on bad DER
        raise SignatureError(f"{what} does not parse: {str(error)[:200]}") from None
    if kind_oid != content_type:
        raise SignatureError(f"{what}'s signed attributes lack content type {content_type}")
    if digest_name not in DIGESTS:
        raise SignatureError(f"{what}'s digest {digest_name} is not one this accepts "
                             f"({', '.join(DIGESTS)})")
    if signed_digest != hashlib.new(digest_name, content).digest():
        raise SignatureError(f"{what} is over another {signs} (messageDigest differs)")
    _check_signature(signer, algorithm, DIGESTS[digest_name], signature, to_verify, what)
    return CheckedSigner(signer, certificates, values, digest_name, signer_info)


def _signer(sid: object, certificates: Sequence[x509.Certificate],
            what: str) -> x509.Certificate:
    """The certificate among `certificates` that the SignerIdentifier names."""
    choice = getattr(sid, "name", "")
    chosen = getattr(sid, "chosen", None)
    for cert in certificates:
        if choice == "issuer_and_serial_number" and chosen is not None:
            if (cert.serial_number == chosen["serial_number"].native
                    and cert.issuer.public_bytes() == chosen["issuer"].dump()):
                return cert
        elif choice == "subject_key_identifier" and chosen is not None:
            try:
                ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
            except x509.ExtensionNotFound:
                continue
            if ski.value.digest == chosen.native:
                return cert
    raise SignatureError(f"{what} does not carry its signer's certificate")


def _cdhash_digests(values: object) -> frozenset[tuple[str, bytes]]:
    """The (hash, digest) pairs of Apple's cdhashes attribute (1.2.840.113635.100.9.2): one
    SEQUENCE {hash algorithm, digest} per code directory the signature covers."""
    from asn1crypto import core

    class _Pair(core.Sequence):  # type: ignore[misc]
        _fields = [("algorithm", core.ObjectIdentifier), ("digest", core.OctetString)]

    pairs = set()
    for value in values or ():  # type: ignore[attr-defined]
        pair = _Pair.load(value.dump(), strict=True)
        name = OID_DIGESTS.get(pair["algorithm"].dotted)
        if name is not None:
            pairs.add((name, bytes(pair["digest"].native)))
    return frozenset(pairs)


def _check_signature(cert: x509.Certificate, algorithm: str, digest: hashes.HashAlgorithm,
                     signature: bytes, data: bytes, what: str) -> None:
    try:
        key = cert.public_key()
        if algorithm == "rsassa_pkcs1v15" and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, data, padding.PKCS1v15(), digest)
        elif algorithm == "ecdsa" and isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, data, ec.ECDSA(digest))
        else:
            raise SignatureError(f"{what}'s algorithm {algorithm} with a "
                                 f"{type(key).__name__} key is not one this verifies")
    except InvalidSignature:
        raise SignatureError(f"{what} does not verify with its signer's key (what it signs "
                             "or its attributes were changed)") from None
    except (ValueError, TypeError, UnsupportedAlgorithm) as error:
        raise SignatureError(f"the signer's key cannot check {what}: "
                             f"{str(error)[:200]}") from None


# --- the chain -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Chain:
    """The path from the signer to a trusted root (leaf first)."""

    certificates: tuple[x509.Certificate, ...]

    @property
    def subjects(self) -> list[str]:
        """Each certificate's subject, leaf first."""
        return [c.subject.rfc4514_string() for c in self.certificates]


def build_chain(leaf: x509.Certificate, pool: Sequence[x509.Certificate],
                roots: Sequence[x509.Certificate]) -> Chain:
    """A path from `leaf` up through `pool` to one of `roots`, each link's signature checked
    (`verify_directly_issued_by`); the first path found. Refused: no path."""
    anchors = {r.public_bytes(_DER) for r in roots}
    candidates = [*roots, *pool]
    path = [leaf]
    while len(path) <= MAX_CHAIN:
        current = path[-1]
        if current.public_bytes(_DER) in anchors:
            return Chain(tuple(path))
        issuer = next((c for c in candidates
                       if c not in path and _issued_by(current, c)), None)
        if issuer is None:
            break
        path.append(issuer)
    raise SignatureError(f"the signer {leaf.subject.rfc4514_string()} does not chain to a "
                         "trusted root (issuer " f"{path[-1].issuer.rfc4514_string()} not "
                         "trusted)")


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    if cert.issuer != issuer.subject:
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def chain_problems(chain: Chain, when: dt.datetime, what: str) -> list[str]:
    """Why `chain` is not a valid code-signing chain at `when` (`what` names that moment):
    validity dates, CA constraints on issuers, key usages."""
    problems = []
    for depth, cert in enumerate(chain.certificates):
        name = cert.subject.rfc4514_string()
        if not cert.not_valid_before_utc <= when <= cert.not_valid_after_utc:
            problems.append(f"{name} is not valid {what} ({when:%Y-%m-%d %H:%M} UTC; valid "
                            f"{cert.not_valid_before_utc:%Y-%m-%d} to "
                            f"{cert.not_valid_after_utc:%Y-%m-%d})")
        constraints = _extension(cert, x509.BasicConstraints)
        usage = _extension(cert, x509.KeyUsage)
        if depth == 0:
            if constraints is not None and constraints.ca:
                problems.append(f"the signer {name} is a CA certificate")
            if usage is not None and not usage.digital_signature:
                problems.append(f"the signer {name}'s key usage excludes digital signatures")
            continue
        if constraints is None or not constraints.ca:
            problems.append(f"{name} signs certificates but is not a CA")
        elif constraints.path_length is not None and constraints.path_length < depth - 1:
            problems.append(f"{name}'s path length ({constraints.path_length}) is exceeded")
        if usage is not None and not usage.key_cert_sign:
            problems.append(f"{name}'s key usage excludes signing certificates")
    return problems


def code_signing_problem(leaf: x509.Certificate, apple: bool) -> str | None:
    """Why `leaf` may not sign an application: without Apple's roots, it needs the
    codeSigning extended key usage (or Apple's Developer ID Application marker); under Apple's
    roots, the Developer ID Application marker itself."""
    name = leaf.subject.rfc4514_string()
    marked = _has(leaf, DEVELOPER_ID_APPLICATION)
    if apple:
        return None if marked else (f"the signer {name} is not a Developer ID Application "
                                    "certificate (no 1.2.840.113635.100.6.1.13)")
    usage = _extension(leaf, x509.ExtendedKeyUsage)
    if marked or (usage is not None and ExtendedKeyUsageOID.CODE_SIGNING in usage):
        return None
    return f"the signer {name} is not a code-signing certificate (no codeSigning usage)"


def team_of(leaf: x509.Certificate) -> str | None:
    """The team identifier: the one organizational unit of the signer's subject."""
    units = leaf.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    if len(units) != 1:
        return None
    value = units[0].value
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def is_developer_id_ca(cert: x509.Certificate) -> bool:
    """Whether `cert` carries Apple's Developer ID intermediate marker."""
    return _has(cert, DEVELOPER_ID_CA)


def _has(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> bool:
    try:
        cert.extensions.get_extension_for_oid(oid)
    except x509.ExtensionNotFound:
        return False
    return True


def _extension(cert: x509.Certificate, kind: type[T]) -> T | None:
    try:
        return cert.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None

