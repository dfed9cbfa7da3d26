"""Serialized objects hidden in strings: pickle bytes, YAML `!!python` tags, base64 of either.

Safetensors `__metadata__` is a map of strings a loader hands to the caller; a value that is a
pickle or a Python-tagged YAML document is an object waiting for someone's `pickle.loads` or
`yaml.unsafe_load`, and has no business in weights' metadata.
"""

from __future__ import annotations

import base64
import binascii
import io
import re

from dflash_guard.scan.pickle_stream import read_stream

MAX_PARSED = 64 * 1024  # bytes of one value walked as a pickle
MAX_SIGNATURES = 2  # pickle signatures followed per value
MAX_CHECKED = 4 * 1024 * 1024  # characters of metadata checked per file (see `too_large`)
_YAML_PYTHON = re.compile(r"!!python/|!python/|tag:yaml\.org,2002:python/")
_PICKLE_SIGNATURE = re.compile(rb"\x80[\x02-\x05]")
_DOTTED = re.compile(r"[A-Za-z_][\w.]*")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")


def too_large(values: list[str]) -> bool:
    """Whether `values` together exceed what one file may have checked (`MAX_CHECKED`)."""
    return sum(len(value) for value in values) > MAX_CHECKED


def serialized_payload(text: str) -> str | None:
    """What serialized object `text` carries (as itself or base64-encoded), or None."""
    found = _raw_payload(text.encode("utf-8", "surrogatepass"), text)
    if found:
        return found
    compact = "".join(text.split())
    if _BASE64.fullmatch(compact):
        try:
            decoded = base64.b64decode(compact + "=" * (-len(compact) % 4), altchars=_alt(compact))
        except (binascii.Error, ValueError):
            return None
        found = _raw_payload(decoded, decoded.decode("latin-1"))
        return f"base64 of {found}" if found else None
    return None


def _alt(text: str) -> bytes | None:
    return b"-_" if ("-" in text or "_" in text) else None


def _raw_payload(data: bytes, text: str) -> str | None:
    if _YAML_PYTHON.search(text):
        return "a YAML document with a !!python tag"
    for blob in {data, text.encode("latin-1", "ignore")}:
        blob = blob[:MAX_PARSED]
        for count, match in enumerate(_PICKLE_SIGNATURE.finditer(blob)):
            if count >= MAX_SIGNATURES or _is_pickle(blob[match.start() :]):
                return "pickle bytes"  # a value full of pickle signatures is one too
        if b"." in blob and _is_pickle(blob, needs_global=True):  # protocols 0-1: no signature
            return "a pickle that imports a global"
    return None


def _is_pickle(data: bytes, *, needs_global: bool = False) -> bool:
    """Whether `data` starts with a complete pickle stream, or one importing a global; with
    `needs_global`, a complete stream importing a global with an identifier's name (prose that
    happens to start with an opcode never gets that far)."""
    result = read_stream(io.BytesIO(data))
    imports = any(
        g.module and g.name and _DOTTED.fullmatch(g.module) and _DOTTED.fullmatch(g.name)
        for g in result.globals
    )
    complete = result.error is None
    return (imports and complete) if needs_global else (complete or imports)
