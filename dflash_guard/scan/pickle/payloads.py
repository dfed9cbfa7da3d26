"""Serialized objects hidden in strings: pickle bytes, YAML `!!python` tags (also %-escaped or
split over a `%TAG` directive), and either inside base64, hex or zlib/gzip/bz2/xz anywhere in
the value, within a bounded cost.

Safetensors `__metadata__` is a map of strings a loader hands to the caller; a value that is a
pickle or a Python-tagged YAML document is an object waiting for someone's `pickle.loads` or
`yaml.unsafe_load`, and has no business in weights' metadata.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import io
import itertools
import lzma
import re
import zlib
from collections.abc import Callable, Iterator
from urllib.parse import unquote

from dflash_guard.scan.pickle.stream import read_stream

MAX_PARSED = 64 * 1024  # bytes of one value walked as a pickle
MAX_SIGNATURES = 2  # pickle signatures followed per value
MAX_CHECKED = 4 * 1024 * 1024  # characters of metadata checked per file (see `too_large`)
MAX_LAYERS = 3  # encodings inside encodings (base64 of zlib of a pickle is two)
MAX_CANDIDATES = 16  # encoded runs (or compressed-stream starts) tried per kind and layer
MAX_DECODED = 1024 * 1024  # bytes decoded per value, all layers together
_YAML_PYTHON = re.compile(r"!!python/|!python/|tag:yaml\.org,2002:python/")
# `%TAG !x! tag:yaml.org,2002:` then `!x!python/...`: the tag is split over a directive.
_YAML_TAG_DIRECTIVE = re.compile(r"%TAG\s+\S+\s+tag:yaml\.org,2002:")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2}){16,}")
_COMPRESSED = (
    ("gzip", b"\x1f\x8b", lambda: zlib.decompressobj(47)),
    ("zlib", b"\x78\x9c", lambda: zlib.decompressobj(15)),
    ("zlib", b"\x78\xda", lambda: zlib.decompressobj(15)),
    ("zlib", b"\x78\x01", lambda: zlib.decompressobj(15)),
    ("zlib", b"\x78\x5e", lambda: zlib.decompressobj(15)),
    ("bz2", b"BZh", bz2.BZ2Decompressor),
    ("xz", b"\xfd7zXZ\x00", lzma.LZMADecompressor),
)
_PICKLE_SIGNATURE = re.compile(rb"\x80[\x02-\x05]")
_DOTTED = re.compile(r"[A-Za-z_][\w.]*")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")


def too_large(values: list[str]) -> bool:
    """Whether `values` together exceed what one file may have checked (`MAX_CHECKED`)."""
    return sum(len(value) for value in values) > MAX_CHECKED


def serialized_payload(text: str) -> str | None:
    """What serialized object `text` carries, as itself or in an encoding anywhere inside it
    (base64, hex, zlib/gzip/bz2/xz, up to `MAX_LAYERS` deep), or None. The cost is bounded:
    `MAX_CANDIDATES` encoded runs per layer, `MAX_PARSED` bytes per decoding and
    `MAX_DECODED` bytes decoded per value."""
    budget = [MAX_DECODED]
    return _search(text.encode("utf-8", "surrogatepass"), text, 0, budget)


def _search(data: bytes, text: str, depth: int, budget: list[int]) -> str | None:
    found = _raw_payload(data, text)
    if found or depth >= MAX_LAYERS:
        return found
    for label, decoded in _decodings(data, text, budget):
        found = _search(decoded, decoded.decode("latin-1"), depth + 1, budget)
        if found:
            return f"{label} of {found}"
    return None


def _decodings(data: bytes, text: str, budget: list[int]) -> Iterator[tuple[str, bytes]]:
    """Each decoding of an encoded run inside the value, while the budget lasts."""
    for label, pattern, decode in (("base64", _BASE64, _from_base64), ("hex", _HEX, _from_hex)):
        for match in itertools.islice(pattern.finditer(text), MAX_CANDIDATES):
            decoded = decode(match.group(0)[: 2 * MAX_PARSED])
            if decoded and budget[0] > 0:
                budget[0] -= len(decoded)
                yield label, decoded
    blobs = [data]
    if all(ord(c) < 256 for c in text):  # code points as bytes: how JSON text gives bytes back
        blobs.append(text.encode("latin-1"))
    for blob in blobs:
        for label, magic, opener in _COMPRESSED:
            for at in itertools.islice(_positions(blob, magic), MAX_CANDIDATES):
                decoded = _inflate(opener, blob[at:])
                if decoded and budget[0] > 0:
                    budget[0] -= len(decoded)
                    yield label, decoded


def _positions(data: bytes, magic: bytes) -> Iterator[int]:
    at = data.find(magic)
    while at >= 0:
        yield at
        at = data.find(magic, at + 1)


def _from_base64(run: str) -> bytes | None:
    try:
        return base64.b64decode(run + "=" * (-len(run.rstrip("=")) % 4), altchars=_alt(run))
    except (binascii.Error, ValueError):
        return None


def _from_hex(run: str) -> bytes | None:
    try:
        return bytes.fromhex(run[: len(run) - len(run) % 2])
    except ValueError:
        return None


def _inflate(opener: Callable[[], object], data: bytes) -> bytes | None:
    """At most `MAX_PARSED` bytes of a compressed stream (a bomb stops at the cap)."""
    try:
        return opener().decompress(data[: 4 * MAX_PARSED], MAX_PARSED) or None  # type: ignore[attr-defined]
    except (zlib.error, OSError, EOFError, ValueError, lzma.LZMAError):
        return None


def _alt(text: str) -> bytes | None:
    return b"-_" if ("-" in text or "_" in text) else None


def _raw_payload(data: bytes, text: str) -> str | None:
    if _YAML_PYTHON.search(text) or ("%" in text and _YAML_PYTHON.search(unquote(text))) or (
        _YAML_TAG_DIRECTIVE.search(text) and "python/" in text
    ):
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
