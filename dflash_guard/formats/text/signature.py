"""How a refused signature reads in a text view: one plain line, never a library's Python
reprs (model_signing's `Digest(algorithm=..., digest_value=b'...')`), and an approval that
nobody could check is said to be unchecked, not bad."""

from __future__ import annotations

NO_KEY = "the policy accepts no public key for it"

_PLAIN = (  # what model_signing's messages mean, as one line a user can act on
    ("Hash mismatch", "the signed bytes do not match the file: it was changed after signing"),
    ("Key mismatch", "signed with another key"),
    ("Signature mismatch", "the signature does not verify with this key"),
)


def plain_reason(reason: str) -> str:
    """`reason` (`KEY: message; KEY: message`) with each library message made one plain line."""
    parts = []
    for part in reason.split("; "):
        key, sep, message = part.partition(": ")
        if not sep:
            key, message = "", part
        for marker, plain in _PLAIN:
            if marker in message:
                message = plain
                break
        parts.append(f"{key}: {message}" if key else message)
    return "; ".join(parts)


def unchecked_approval(reason: str) -> bool:
    """Whether a refused approval signature was never checked (the policy names no key)."""
    return reason.startswith(NO_KEY)
