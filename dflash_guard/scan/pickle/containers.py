"""Containers a model loader opens before it unpickles: zip, tar and compressed streams.

Each helper answers one question with the standard library (`zipfile`, `tarfile`, `zlib`, `bz2`,
`lzma`, and `lz4` when installed) and caps what it reads: no member or decompressed stream over
`MAX_BYTES`, no archive with over `MAX_MEMBERS` entries.
"""

from __future__ import annotations

import bz2
import importlib.util
import lzma
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from typing import IO, Protocol

MAX_BYTES = 1 << 30  # an archive member or decompressed stream is read into memory up to here
MAX_MEMBERS = 100_000
_EOCD = b"PK\x05\x06"
_EOCD_SEARCH = 64 * 1024 + 22  # where readers look for the end-of-central-directory record
_CHUNK = 1 << 20


class _Decoder(Protocol):
    """The `decompress(data, max_length)` shape bz2, lzma, lz4.frame and `_ZlibDecoder` share."""

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


class TooLarge(ValueError):
    """A member or decompressed stream over `MAX_BYTES`, or an archive over `MAX_MEMBERS`."""


# -- zip: what two readers could see differently ------------------------------------------------
def zip_disagreements(stream: IO[bytes], archive: zipfile.ZipFile) -> list[str]:
    """Why `zipfile` and another reader (torch's miniz, a forward-scanning unzip) could read
    this archive differently: several end records, overlapping or duplicated members, local
    header names that differ from the central directory, bytes before the first member."""
    problems: list[str] = []
    size = stream.seek(0, 2)
    spans: list[tuple[int, int, str]] = []
    for info in archive.infolist():
        local = local_header(stream, info.header_offset)
        if local is None:
            problems.append(f"{info.filename!r}: no local file header at its offset")
            continue
        name, header_size = local
        central = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")
        if name != central:
            problems.append(
                f"{info.filename!r}: the local header names it {name.decode('latin-1')!r}"
            )
        spans.append((info.header_offset, info.header_offset + header_size + info.compress_size,
                      info.filename))
    spans.sort()
    for (_, end, first), (start, _, second) in zip(spans, spans[1:], strict=False):
        if start < end:
            problems.append(f"members {first!r} and {second!r} overlap")
    names = [info.filename for info in archive.infolist()]
    problems += [f"two members are named {name!r}" for name in sorted(_duplicates(names))]
    if spans and spans[0][0] > 0:
        problems.append(f"{spans[0][0]} bytes before the first member (a loader that needs the "
                        "zip at byte 0 reads something else)")
    tail_start = max(0, size - _EOCD_SEARCH)
    stream.seek(tail_start)
    tail = stream.read(_EOCD_SEARCH)  # no further, should the file grow
    records = [tail_start + i for i in _find_all(tail, _EOCD)]
    outside = [r for r in records if not any(s <= r < e for s, e, _ in spans)]
    if len(outside) > 1:
        problems.append(f"{len(outside)} end-of-central-directory records (readers pick "
                        "different ones)")
    return problems


def _duplicates(names: list[str]) -> set[str]:
    seen: set[str] = set()
    twice: set[str] = set()
    for name in names:
        (twice if name in seen else seen).add(name)
    return twice


def _find_all(data: bytes, needle: bytes) -> list[int]:
    found, start = [], data.find(needle)
    while start != -1:
        found.append(start)
        start = data.find(needle, start + 1)
    return found


def local_header(stream: IO[bytes], offset: int) -> tuple[bytes, int] | None:
    """The name in the local file header at `offset`, and the header's size."""
    stream.seek(offset)
    fixed = stream.read(30)
    if len(fixed) < 30 or fixed[:4] != b"PK\x03\x04":
        return None
    name_length, extra_length = struct.unpack("<HH", fixed[26:30])
    return stream.read(name_length), 30 + name_length + extra_length


# -- tar: torch's legacy format ----------------------------------------------------------------
def is_tar(head: bytes) -> bool:
    """Whether `head` (at least 512 bytes) starts with a tar header `tarfile` accepts, as
    `torch.load` tries `tarfile.open` on every file before anything else."""
    if len(head) < tarfile.BLOCKSIZE:
        return False
    try:
        tarfile.TarInfo.frombuf(head[: tarfile.BLOCKSIZE], "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def tar_members(stream: IO[bytes]) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every regular member, one at a time; `tarfile.TarError` on a broken
    archive, `TooLarge` over the limits."""
    stream.seek(0)
    with tarfile.open(fileobj=stream, mode="r:") as archive:
        for index, info in enumerate(archive):
            if index >= MAX_MEMBERS:
                raise TooLarge(f"over {MAX_MEMBERS} tar members")
            if info.issym() or info.islnk():
                raise tarfile.TarError(f"tar member {info.name!r} is a link")
            if not info.isfile():
                continue
            if info.size > MAX_BYTES:
                raise TooLarge(f"tar member {info.name!r} has over {MAX_BYTES} bytes")
            handle = archive.extractfile(info)
            yield info.name, handle.read() if handle else b""


# -- compressed streams: what joblib (and torch through it) decompresses -----------------------
def compression(head: bytes) -> str | None:
    """The compressor joblib would pick for a file starting with `head`, or None."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bz2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x5d\x00\x00"):
        return "lzma"
    if head.startswith(b"\x04\x22\x4d\x18"):
        return "lz4"
    if len(head) >= 2 and head[0] == 0x78 and int.from_bytes(head[:2], "big") % 31 == 0:
        return "zlib"
    return None


def lz4_available() -> bool:
    """Whether the optional `lz4` package (joblib's lz4 compressor) is installed."""
    return importlib.util.find_spec("lz4") is not None


def decompress(stream: IO[bytes], kind: str) -> bytes:
    """The decompressed bytes of `stream` (from its start); `TooLarge` past `MAX_BYTES`, the
    codec's own error (`OSError`, `zlib.error`, `lzma.LZMAError`, `EOFError`) on bad data."""
    stream.seek(0)
    decoder = _decoder(kind)
    out = bytearray()
    while chunk := stream.read(_CHUNK):
        out += decoder.decompress(chunk, MAX_BYTES + 1 - len(out))
        while not _finished(decoder) and not _needs_input(decoder) and len(out) <= MAX_BYTES:
            more = decoder.decompress(b"", MAX_BYTES + 1 - len(out))
            if not more:
                break
            out += more
        if len(out) > MAX_BYTES:
            raise TooLarge(f"{kind} stream decompresses to over {MAX_BYTES} bytes")
        if _finished(decoder):
            break
    if not _finished(decoder):
        raise EOFError(f"{kind} stream is truncated (no end marker): a loader reads part of it")
    return bytes(out)


def _decoder(kind: str) -> _Decoder:
    if kind == "zlib":
        return _ZlibDecoder(zlib.MAX_WBITS)
    if kind == "gzip":
        return _ZlibDecoder(16 + zlib.MAX_WBITS)
    if kind == "bz2":
        return bz2.BZ2Decompressor()
    if kind in ("xz", "lzma"):
        return lzma.LZMADecompressor()
    if kind == "lz4":
        import lz4.frame  # optional: checked with `lz4_available` first

        lz4_decoder: _Decoder = lz4.frame.LZ4FrameDecompressor()  # lz4 ships no type stubs
        return lz4_decoder
    raise ValueError(f"unknown compression {kind!r}")


class _ZlibDecoder:
    """zlib's decompressobj behind the `decompress(data, max_length)` shape of bz2/lzma."""

    def __init__(self, wbits: int) -> None:
        self._inner = zlib.decompressobj(wbits)
        self.needs_input = True
        self.eof = False

    def decompress(self, data: bytes, max_length: int) -> bytes:
        out = self._inner.decompress(self._inner.unconsumed_tail + data, max_length)
        self.needs_input = not self._inner.unconsumed_tail
        self.eof = self._inner.eof
        return out


def _needs_input(decoder: _Decoder) -> bool:
    return bool(getattr(decoder, "needs_input", True))


def _finished(decoder: _Decoder) -> bool:
    return bool(getattr(decoder, "eof", False))
