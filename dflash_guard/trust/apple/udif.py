"""The signed parts of a UDIF disk image (`.dmg`), read with bounded reads: the 512-byte "koly"
trailer, the embedded signature superblob it points at, and the code directories in it.

The layout is Apple's (`cs_blobs.h`, `CodeDirectory`) as apple-platform-rs reads and writes it
(`apple-codesign/src/dmg.rs`, commit 607b3c1d): the superblob sits right after the image's
property list (`plist_offset + plist_length`); the code directory has one code slot, the digest
of the image from byte 0 up to its code limit (the superblob's offset), and special slot 6
("rep specific") holds the digest of the trailer with `code_signature_size` zeroed and
`code_signature_offset` set to that same offset. Anything else is refused with a reason
(`SignatureError`); a file with no trailer is not a disk image (`InputError`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
from typing import BinaryIO

from dflash_guard.errors import InputError

KOLY_SIZE = 512
KOLY_MAGIC = b"koly"
MAX_SIGNATURE_BYTES = 4 * 1024 * 1024  # a real superblob is a few KB (ticket included)
MAX_BLOBS = 32  # Apple writes at most ~12 slots
SUPERBLOB_MAGIC = 0xFADE0CC0
CODE_DIRECTORY_MAGIC = 0xFADE0C02
REQUIREMENTS_MAGIC = 0xFADE0C01
WRAPPER_MAGIC = 0xFADE0B01  # the CMS signature and the stapled ticket

SLOT_CODE_DIRECTORY = 0
SLOT_REQUIREMENTS = 2
SLOT_REP_SPECIFIC = 6
ALTERNATE_CODE_DIRECTORIES = range(0x1000, 0x1005)
SLOT_SIGNATURE = 0x10000
SLOT_TICKET = 0x10002
# Special slots a disk image's superblob may carry, each hashed in the code directory:
# requirements, entitlements (XML, DER), launch and library constraints.
HASHED_BLOB_SLOTS = frozenset({2, 5, 7, 8, 9, 10, 11})

# CodeDirectory hashType -> (hashlib name, digest size)
HASH_TYPES = {1: ("sha1", 20), 2: ("sha256", 32), 3: ("sha256", 20), 4: ("sha384", 48)}
STRONG_HASHES = frozenset({"sha256", "sha384"})
CDHASH_BYTES = 20  # a cdhash is the code directory's digest cut to 20 bytes


class SignatureError(Exception):
    """The image's signature is malformed or does not match: a refusal (exit 1), not a crash."""


@dataclasses.dataclass(frozen=True)
class Trailer:
    """The fields of the koly trailer the signature involves, and its raw bytes."""

    raw: bytes
    plist_offset: int
    plist_length: int
    signature_offset: int
    signature_size: int

    @property
    def after_plist(self) -> int:
        """Where a signature superblob must start."""
        return self.plist_offset + self.plist_length

    def digest_for_code_directory(self, hash_name: str) -> bytes:
        """The digest special slot 6 holds: the trailer with the signature size zeroed and the
        signature offset set to `after_plist` (dmg.rs `digest_for_code_directory`)."""
        zeroed = bytearray(self.raw)
        struct.pack_into(">QQ", zeroed, 296, self.after_plist, 0)
        return hashlib.new(hash_name, bytes(zeroed)).digest()


@dataclasses.dataclass(frozen=True)
class CodeDirectory:
    """One code directory: its slot, raw bytes and the fields a disk image uses."""

    slot: int
    raw: bytes
    version: int
    flags: int
    identifier: str
    team_id: str | None
    hash_name: str
    hash_size: int
    code_limit: int
    code_hashes: tuple[bytes, ...]
    special: dict[int, bytes]  # special slot -> digest (all-zero digests left out)

    @property
    def cdhash(self) -> bytes:
        """The digest of the whole code directory, in its own hash type (full length)."""
        return hashlib.new(self.hash_name, self.raw).digest()


@dataclasses.dataclass(frozen=True)
class Signature:
    """The superblob: its blobs by slot (raw bytes, headers included)."""

    blobs: dict[int, bytes]

    def payload(self, slot: int) -> bytes | None:
        """The content of a wrapper blob (CMS, ticket), or None when the slot is absent."""
        blob = self.blobs.get(slot)
        return None if blob is None else blob[8:]

    def code_directories(self) -> list[CodeDirectory]:
        """The primary code directory, then the alternates, each parsed."""
        slots = [SLOT_CODE_DIRECTORY, *ALTERNATE_CODE_DIRECTORIES]
        return [parse_code_directory(slot, self.blobs[slot]) for slot in slots
                if slot in self.blobs]


def read_trailer(handle: BinaryIO, size: int, name: str) -> Trailer:
    """The koly trailer of the open image (`size` bytes); an `InputError` when it has none."""
    if size < KOLY_SIZE:
        raise InputError(f"{name}: {size} bytes, too short for a disk image (no koly trailer)")
    handle.seek(size - KOLY_SIZE)
    raw = handle.read(KOLY_SIZE)
    if len(raw) != KOLY_SIZE or raw[:4] != KOLY_MAGIC:
        raise InputError(f"{name}: not a UDIF disk image (no koly trailer in its last 512 bytes)")
    header_size, = struct.unpack_from(">I", raw, 8)
    if header_size != KOLY_SIZE:
        raise InputError(f"{name}: koly trailer says its size is {header_size}, not 512")
    plist_offset, plist_length = struct.unpack_from(">QQ", raw, 216)
    signature_offset, signature_size = struct.unpack_from(">QQ", raw, 296)
    return Trailer(raw, plist_offset, plist_length, signature_offset, signature_size)


def read_signature(handle: BinaryIO, size: int, trailer: Trailer) -> Signature:
    """The superblob the trailer points at, checked to sit where a signature must (right after
    the property list, nothing but zeros between it and the trailer) and to parse whole."""
    if trailer.signature_offset == 0 and trailer.signature_size == 0:
        raise SignatureError("the image is not signed (its trailer points at no signature)")
    end = size - KOLY_SIZE
    if trailer.signature_size > MAX_SIGNATURE_BYTES:
        raise SignatureError(f"the signature claims {trailer.signature_size:,} bytes (more than "
                             f"the {MAX_SIGNATURE_BYTES:,} this reads)")
    if trailer.signature_offset != trailer.after_plist:
        raise SignatureError(f"the signature starts at byte {trailer.signature_offset}, not "
                             f"right after the image's property list ({trailer.after_plist})")
    if trailer.signature_offset + trailer.signature_size > end:
        raise SignatureError("the signature runs past the trailer (a truncated image?)")
    handle.seek(trailer.signature_offset)
    data = handle.read(trailer.signature_size)
    gap = handle.read(min(end - trailer.signature_offset - trailer.signature_size,
                          MAX_SIGNATURE_BYTES + 1))
    if len(gap) > MAX_SIGNATURE_BYTES or gap.strip(b"\0"):
        raise SignatureError("bytes that no signature covers lie between the signature and "
                             "the trailer")
    return parse_superblob(data)


def parse_superblob(data: bytes) -> Signature:
    """The blobs of an embedded-signature superblob, each inside it, no slot twice."""
    if len(data) < 12:
        raise SignatureError("the signature is too short for a superblob")
    magic, length, count = struct.unpack_from(">III", data, 0)
    if magic != SUPERBLOB_MAGIC:
        raise SignatureError(f"the signature is not a superblob (magic {magic:#x})")
    if length != len(data):
        raise SignatureError(f"the superblob says {length} bytes; the trailer gives "
                             f"{len(data)}")
    if count > MAX_BLOBS or 12 + 8 * count > length:
        raise SignatureError(f"the superblob claims {count} blobs (at most {MAX_BLOBS}, "
                             "inside it)")
    blobs: dict[int, bytes] = {}
    for index in range(count):
        slot, offset = struct.unpack_from(">II", data, 12 + 8 * index)
        if slot in blobs:
            raise SignatureError(f"slot {slot:#x} appears twice in the superblob")
        if offset < 12 + 8 * count or offset + 8 > length:
            raise SignatureError(f"slot {slot:#x}'s blob lies outside the superblob")
        blob_length, = struct.unpack_from(">I", data, offset + 4)
        if blob_length < 8 or offset + blob_length > length:
            raise SignatureError(f"slot {slot:#x}'s blob runs outside the superblob")
        blobs[slot] = data[offset:offset + blob_length]
    if SLOT_CODE_DIRECTORY not in blobs:
        raise SignatureError("the signature has no code directory")
    return Signature(blobs)


def _c_string(data: bytes, offset: int, what: str) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise SignatureError(f"the code directory's {what} lies outside it")
    try:
        return data[offset:end].decode("ascii")
    except UnicodeDecodeError:
        raise SignatureError(f"the code directory's {what} is not ASCII") from None


def parse_code_directory(slot: int, blob: bytes) -> CodeDirectory:
    """A code directory blob, its hash slots bounded by its own length."""
    if len(blob) < 44:
        raise SignatureError(f"slot {slot:#x}: too short for a code directory")
    (magic, length, version, flags, hash_offset, ident_offset, n_special, n_code, code_limit,
     hash_size, hash_type, _platform, page_log2) = struct.unpack_from(">IIIIIIIIIBBBB", blob, 0)
    if magic != CODE_DIRECTORY_MAGIC or length != len(blob):
        raise SignatureError(f"slot {slot:#x} is not a code directory")
    if hash_type not in HASH_TYPES or HASH_TYPES[hash_type][1] != hash_size:
        raise SignatureError(f"slot {slot:#x}: unknown hash type {hash_type} (size {hash_size})")
    if hash_offset < n_special * hash_size or hash_offset + n_code * hash_size > length:
        raise SignatureError(f"slot {slot:#x}: its hash slots lie outside it")
    if version >= 0x20100 and len(blob) >= 48 and struct.unpack_from(">I", blob, 44)[0]:
        raise SignatureError(f"slot {slot:#x}: a scatter vector (not used by disk images)")
    team_id = None
    if version >= 0x20200 and len(blob) >= 52:
        team_offset, = struct.unpack_from(">I", blob, 48)
        team_id = _c_string(blob, team_offset, "team identifier") if team_offset else None
    if version >= 0x20300 and len(blob) >= 64:
        limit64, = struct.unpack_from(">Q", blob, 56)
        code_limit = limit64 or code_limit
    if n_code != 1 or page_log2 != 0:
        raise SignatureError(f"slot {slot:#x}: {n_code} code slots of 2^{page_log2} bytes; a "
                             "disk image's code directory has one slot over the whole image")
    hash_name = HASH_TYPES[hash_type][0]
    special = {}
    for index in range(1, n_special + 1):
        digest = blob[hash_offset - index * hash_size:hash_offset - (index - 1) * hash_size]
        if digest.strip(b"\0"):
            special[index] = digest
    return CodeDirectory(
        slot=slot, raw=blob, version=version, flags=flags,
        identifier=_c_string(blob, ident_offset, "identifier"), team_id=team_id,
        hash_name=hash_name, hash_size=hash_size, code_limit=code_limit,
        code_hashes=(blob[hash_offset:hash_offset + hash_size],), special=special)


def digest_prefix(handle: BinaryIO, limit: int, hash_names: set[str]) -> dict[str, bytes]:
    """The digests (each of `hash_names`) of the first `limit` bytes of the image, and the
    sha256 of the whole file read on to its end, under the key `file-sha256`."""
    hashers = {name: hashlib.new(name) for name in hash_names}
    whole = hashlib.sha256()
    handle.seek(0)
    done = 0
    while chunk := handle.read(1024 * 1024):
        head = chunk[:max(0, limit - done)]
        for hasher in hashers.values():
            hasher.update(head)
        whole.update(chunk)
        done += len(chunk)
    digests = {name: hasher.digest() for name, hasher in hashers.items()}
    digests["file-sha256"] = whole.digest()
    return digests


def image_size(handle: BinaryIO) -> int:
    """The open image's size in bytes."""
    return os.fstat(handle.fileno()).st_size
