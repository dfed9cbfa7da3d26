"""Tell file formats apart by their first bytes, whatever their extension says."""

from __future__ import annotations

import enum
import os
import struct
from pathlib import Path

from dflash_guard.fileio import open_binary

PICKLE_SUFFIXES = frozenset(
    {".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib", ".dill", ".npy", ".npz"}
)
SAFETENSORS_SUFFIXES = frozenset({".safetensors"})
GGUF_SUFFIXES = frozenset({".gguf"})

# Opcodes a protocol 0/1 pickle may start with: MARK, EMPTY_*, GLOBAL, INST, INT, LONG, STRING,
# UNICODE, NONE, FLOAT, PERSID and friends.
_PROTOCOL0_FIRST = frozenset(b"(}])cilLISVNFPGJKMUTXq")


class Format(enum.StrEnum):
    """A file format dflash-guard knows how to scan (or knows it cannot)."""

    zip = "zip"
    pickle = "pickle"
    numpy = "numpy"
    safetensors = "safetensors"
    gguf = "gguf"
    archive = "archive"  # 7z, rar, gzip, xz, bzip2: archives we do not open
    unknown = "unknown"


def sniff_bytes(head: bytes, size: int, *, protocol0: bool = False) -> Format:
    """The format whose signature `head` (the first bytes of a `size`-byte file) carries.

    Protocol 0/1 pickles have no signature (they start with a printable opcode), so they are
    recognised only when `protocol0` is set, i.e. for files a loader would treat as pickles.
    """
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")):
        return Format.zip
    if head.startswith(b"\x93NUMPY"):
        return Format.numpy
    if head.startswith(b"GGUF"):
        return Format.gguf
    if head.startswith((b"7z\xbc\xaf\x27\x1c", b"Rar!", b"\x1f\x8b", b"\xfd7zXZ", b"BZh")):
        return Format.archive
    if len(head) >= 2 and head[0] == 0x80 and head[1] <= 5:
        return Format.pickle
    if _looks_like_safetensors(head, size):
        return Format.safetensors
    if protocol0 and head and head[0] in _PROTOCOL0_FIRST:
        return Format.pickle
    return Format.unknown


def sniff(path: Path) -> Format:
    """The format of the file at `path`, read from its first bytes (and its extension)."""
    with open_binary(path) as handle:
        head = handle.read(16)
        size = os.fstat(handle.fileno()).st_size
    protocol0 = path.suffix.lower() in PICKLE_SUFFIXES
    return sniff_bytes(head, size, protocol0=protocol0)


def _looks_like_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 2 <= length <= size - 8 and head[8:9] == b"{"
