"""The RFC 3161 timestamp token beside an image's CMS signature (an unsigned attribute, as
Apple's timestamp authority issues it): a SignedData over a TSTInfo whose message imprint is
the digest of the CMS signature value. A verified token makes its `gen_time` the signing time,
instead of the signer's own claim; its authority's chain is checked by `image` (to Apple's root
through the Apple Timestamp CA, or to the policy's roots)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import warnings
from typing import Any

from cryptography import x509
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID

from dflash_guard.trust.apple.cms import DIGESTS, check_signed_data
from dflash_guard.trust.apple.udif import SignatureError

TST_INFO = "1.2.840.113549.1.9.16.1.4"
WHAT = "the timestamp token"


@dataclasses.dataclass(frozen=True)
class Timestamp:
    """A verified token: the time it vouches for, its authority and the certificates it
    carried."""

    gen_time: dt.datetime
    authority: x509.Certificate
    certificates: tuple[x509.Certificate, ...]


def verify_timestamp(token: Any, signature: bytes) -> Timestamp:
    """Check `token` (an asn1crypto ContentInfo) over the CMS `signature` value: one signer
    with the timeStamping usage, its signature over a TSTInfo whose imprint is `signature`'s
    digest."""
    from asn1crypto import tsp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        try:
            if token["content_type"].native != "signed_data":
                raise SignatureError(f"{WHAT} is not SignedData")
            signed = token["content"]
            encapsulated = signed["encap_content_info"]
            if encapsulated["content_type"].dotted != TST_INFO:
                raise SignatureError(f"{WHAT} does not hold a TSTInfo")
            raw = encapsulated["content"].contents
            info = tsp.TSTInfo.load(raw, strict=True)
            imprint = info["message_imprint"]
            imprint_name = imprint["hash_algorithm"]["algorithm"].native
            imprinted = bytes(imprint["hashed_message"].native)
            gen_time = info["gen_time"].native
        except SignatureError:
            raise
        except Exception as error:  # asn1crypto raises ValueError, TypeError, ... on bad DER
            raise SignatureError(f"{WHAT} does not parse: {str(error)[:200]}") from None
        checked = check_signed_data(signed, raw, TST_INFO, WHAT, "TSTInfo")
    if imprint_name not in DIGESTS:
        raise SignatureError(f"{WHAT}'s imprint uses {imprint_name}, not one this accepts")
    if imprinted != hashlib.new(imprint_name, signature).digest():
        raise SignatureError(f"{WHAT} is over another signature (its message imprint differs)")
    try:
        usage = checked.signer.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usage = None
    if usage is None or ExtendedKeyUsageOID.TIME_STAMPING not in usage:
        raise SignatureError(f"{WHAT}'s signer {checked.signer.subject.rfc4514_string()} is "
                             "not a timestamping certificate")
    if not isinstance(gen_time, dt.datetime) or gen_time.tzinfo is None:
        raise SignatureError(f"{WHAT} has no time")
    return Timestamp(gen_time, checked.signer, checked.certificates)
