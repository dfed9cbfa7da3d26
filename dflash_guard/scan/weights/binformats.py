"""Binary formats real repositories ship that no loader unpickles, each accepted only when the
whole file parses as that format (the runner then still probes it for a pickle stream).

- numeric `.npz`: a zip (no reader disagreement) whose every member is a `.npy` array that
  `numpy.load(allow_pickle=False)` reads and whose bytes are exactly what its shape needs;
- sentencepiece `tokenizer.model`: a `ModelProto` parsed whole by the `protobuf` runtime with the
  schema's top level and pieces declared (no unknown field there; the nested trainer and
  normalizer specs are walked as protobuf wire format, not checked field by field);
- images of a model card: PNG (every chunk's CRC, IHDR first, IEND last, the image data's zlib
  stream inflated to its end and sized by IHDR), JPEG (marker segments to EOI, entropy-coded
  data skipped), WebP (RIFF chunks covering the file exactly) and GIF (blocks and sub-blocks
  from the screen descriptor to the trailer at the very end). JPEG, WebP and GIF pixels are not
  decoded.

Each function returns why the file is not that format, or None.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
import zipfile
import zlib
from functools import cache
from pathlib import Path
from typing import Any

from dflash_guard.fileio import open_binary
from dflash_guard.scan.allowlist import npy_problem
from dflash_guard.scan.pickle import containers

MAX_IMAGE_BYTES = 256 * 1024 * 1024
MAX_SPM_BYTES = 64 * 1024 * 1024
MAX_NPZ_MEMBER = containers.MAX_BYTES
MAX_INFLATED = containers.MAX_BYTES  # PNG image data counted (never kept) up to here
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_CHUNK = 1 << 20
MAX_CHUNKS = 100_000  # PNG/WebP chunks or JPEG segments walked; real images have dozens


def image_kind(head: bytes) -> str | None:
    """`png`, `jpeg`, `webp` or `gif` when `head` (a file's first 12 bytes) starts like one."""
    if head.startswith(PNG_MAGIC):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    return None


def _read(path: Path, limit: int) -> bytes | str:
    with open_binary(path) as handle:
        data = handle.read(limit + 1)
    return data if len(data) <= limit else f"over {limit} bytes"


# -- npz --------------------------------------------------------------------------------------
def npz_problem(path: Path) -> str | None:
    """Why the zip at `path` is not a numeric `.npz`, or None."""
    import numpy as np

    with open_binary(path) as handle:
        try:
            archive = zipfile.ZipFile(handle)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
            return f"not a readable zip: {error}"
        with archive:
            infos = archive.infolist()
            if not infos or len(infos) > containers.MAX_MEMBERS:
                return f"a zip of {len(infos)} members"
            try:
                problems = containers.zip_disagreements(handle, archive)
            except (OSError, ValueError) as error:
                return f"zip readers could disagree: {error}"
            if problems:
                return f"zip readers disagree: {problems[0]}"
            for info in infos:
                problem = _npz_member(archive, info)
                if problem is not None:
                    return f"member {info.filename[:80]!r}: {problem}"
        handle.seek(0)
        try:  # numpy's own reader over the whole file, each member refused if it would unpickle
            with np.load(handle, allow_pickle=False) as npz:
                for key in npz.files:
                    npz[key]
        except Exception as error:  # noqa: BLE001 - numpy raises many types on a bad archive
            return f"numpy.load(allow_pickle=False) refuses it: {type(error).__name__}: {error}"
    return None


def _npz_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str | None:
    if info.is_dir() or not info.filename.endswith(".npy"):
        return "not a .npy array"
    if info.flag_bits & 0x1 or (info.external_attr >> 16) & 0o170000 == 0o120000:
        return "encrypted or a symbolic link"
    if info.file_size > MAX_NPZ_MEMBER:
        return f"over {MAX_NPZ_MEMBER} bytes"
    try:
        with archive.open(info) as member:
            problem = npy_problem(member, info.file_size)
            while member.read(1 << 20):  # to the end: zipfile checks the CRC there
                pass
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as error:
        return f"cannot be read: {error}"
    return problem


# -- sentencepiece ------------------------------------------------------------------------------
@cache
def _model_proto() -> Any:
    """sentencepiece's `ModelProto` (sentencepiece_model.proto), its top level and pieces."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # type: ignore[import-untyped]

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="dflash_guard_sentencepiece.proto", package="dflash_guard.spm", syntax="proto2")
    piece = file.message_type.add(name="SentencePiece")
    for name, number, kind in (("piece", 1, field.TYPE_STRING), ("score", 2, field.TYPE_FLOAT),
                               ("type", 3, field.TYPE_INT32)):
        piece.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    file.message_type.add(name="Opaque")  # a nested spec: walked as wire format
    model = file.message_type.add(name="ModelProto")
    model.field.add(name="pieces", number=1, type=field.TYPE_MESSAGE,
                    type_name=".dflash_guard.spm.SentencePiece", label=field.LABEL_REPEATED)
    for name, number in (("trainer_spec", 2), ("normalizer_spec", 3), ("self_test_data", 4),
                         ("denormalizer_spec", 5)):
        model.field.add(name=name, number=number, type=field.TYPE_MESSAGE,
                        type_name=".dflash_guard.spm.Opaque", label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("dflash_guard.spm.ModelProto"))


_PIECE_TYPES = frozenset(range(1, 7))  # NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE


def sentencepiece_problem(path: Path) -> str | None:
    """Why `path` is not a sentencepiece model, or None."""
    from google.protobuf import message, unknown_fields

    data = _read(path, MAX_SPM_BYTES)
    if isinstance(data, str):
        return data
    model = _model_proto()()
    try:
        model.ParseFromString(data)
    except (message.DecodeError, RecursionError, ValueError) as error:
        return f"not a sentencepiece ModelProto: {error}"
    if len(unknown_fields.UnknownFieldSet(model)):
        return "a ModelProto with fields sentencepiece does not define"
    if not model.pieces:
        return "a ModelProto without pieces"
    for index, piece in enumerate(model.pieces):
        if not piece.piece or len(unknown_fields.UnknownFieldSet(piece)) or (
                piece.HasField("type") and piece.type not in _PIECE_TYPES):
            return f"piece {index} is not a sentencepiece piece"
    return None


# -- tiktoken rank files ----------------------------------------------------------------------
def tiktoken_problem(path: Path) -> str | None:
    """Why `path` is not a tiktoken rank file, or None. tiktoken/load.py load_tiktoken_bpe reads
    each non-empty line as `base64(token) rank` (`line.split()`, `base64.b64decode`, `int`);
    Kimi and other tiktoken models ship it as `tiktoken.model`, beside sentencepiece's name."""
    data = _read(path, MAX_SPM_BYTES)
    if isinstance(data, str):
        return data
    ranks: set[int] = set()
    for number, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        fields = line.split(b" ")
        if len(fields) != 2 or not fields[1].isdigit():
            return f"line {number} is not `base64 rank`"
        try:
            base64.b64decode(fields[0], validate=True)
        except (binascii.Error, ValueError):
            return f"line {number}: the token is not base64"
        ranks.add(int(fields[1]))
    return None if ranks else "no ranks"


# -- images -------------------------------------------------------------------------------------
def image_problem(path: Path, kind: str) -> str | None:
    """Why `path` is not a whole image of `kind` (`image_kind`), or None."""
    data = _read(path, MAX_IMAGE_BYTES)
    if isinstance(data, str):
        return data
    try:
        return {"png": _png, "jpeg": _jpeg, "webp": _webp, "gif": _gif}[kind](data)
    except (struct.error, IndexError, ValueError, zlib.error) as error:
        return f"not a complete {kind}: {error}"


def _png(data: bytes) -> str | None:
    pos, chunks, idat = len(PNG_MAGIC), 0, zlib.decompressobj()
    inflated, header = 0, None
    while True:
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if length > 0x7FFFFFFF or not kind.isalpha() or zlib.crc32(kind + body) != crc:
            return f"PNG chunk {chunks} at {pos}: bad length, type or CRC"
        if chunks == 0:
            if kind != b"IHDR" or length != 13:
                return "PNG without IHDR first"
            header = struct.unpack(">IIBBBBB", body)
        if kind == b"IDAT":
            inflated += len(idat.decompress(body, _CHUNK))
            while idat.unconsumed_tail and inflated <= MAX_INFLATED:
                inflated += len(idat.decompress(idat.unconsumed_tail, _CHUNK))
            if inflated > MAX_INFLATED:
                return f"PNG image data inflates to over {MAX_INFLATED} bytes"
        pos += 12 + length
        chunks += 1
        if chunks > MAX_CHUNKS:
            return f"PNG of over {MAX_CHUNKS} chunks"
        if kind == b"IEND":
            break
    if pos != len(data):
        return f"{len(data) - pos} bytes after IEND"
    if header is None or not idat.eof or idat.unused_data:
        return "PNG image data is not one complete zlib stream"
    width, height, depth, colour, _, _, interlace = header
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(colour)
    if channels is None or width == 0 or height == 0:
        return "PNG header with an unknown colour type or an empty image"
    if interlace == 0:
        expected = height * (1 + math.ceil(width * depth * channels / 8))
        if inflated != expected:
            return f"PNG image data inflates to {inflated} bytes, its header needs {expected}"
    return None


_JPEG_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")  # in scan data: not stuffing, not RSTn
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg(data: bytes) -> str | None:
    pos, frame, segments = 2, False, 0
    while True:
        segments += 1
        if segments > MAX_CHUNKS:
            return f"JPEG of over {MAX_CHUNKS} segments"
        if data[pos] != 0xFF:
            return f"JPEG: no marker at {pos}"
        while data[pos] == 0xFF:  # fill bytes
            pos += 1
        marker = data[pos]
        pos += 1
        if marker == 0xD9:
            break
        if marker in _JPEG_STANDALONE:
            continue
        (length,) = struct.unpack(">H", data[pos:pos + 2])
        if length < 2 or pos + length > len(data):
            return f"JPEG segment {marker:#x} at {pos} runs past the end"
        frame = frame or marker in _JPEG_FRAMES
        pos += length
        if marker == 0xDA:  # entropy-coded data up to the next marker that is not RSTn
            if not frame:
                return "JPEG scan before any frame header"
            found = _JPEG_MARKER.search(data, pos)
            if found is None:
                return "JPEG scan data runs to the end without EOI"
            pos = found.start()
    if pos != len(data):
        return f"{len(data) - pos} bytes after the JPEG's end"
    return None if frame else "JPEG without a frame header"


_WEBP_CHUNKS = frozenset({b"VP8 ", b"VP8L", b"VP8X", b"ALPH", b"ANIM", b"ANMF", b"ICCP", b"EXIF",
                          b"XMP "})


def _webp(data: bytes) -> str | None:
    (size,) = struct.unpack("<I", data[4:8])
    if size + 8 != len(data):
        return f"WebP RIFF size {size} does not cover the file of {len(data)} bytes"
    pos, first, chunks = 12, True, 0
    while pos < len(data):
        chunks += 1
        if chunks > MAX_CHUNKS:
            return f"WebP of over {MAX_CHUNKS} chunks"
        kind = data[pos:pos + 4]
        (length,) = struct.unpack("<I", data[pos + 4:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind not in _WEBP_CHUNKS or len(body) != length:
            return f"WebP chunk {kind!r} at {pos} unknown or truncated"
        if first and (kind not in (b"VP8 ", b"VP8L", b"VP8X") or (
                kind == b"VP8 " and body[3:6] != b"\x9d\x01\x2a") or (
                kind == b"VP8L" and body[:1] != b"\x2f")):
            return "WebP without a valid first image chunk"
        first = False
        pos += 8 + length + (length & 1)
    return None if pos == len(data) and not first else "WebP chunks do not end at the file's end"



def _gif(data: bytes) -> str | None:
    (flags,) = struct.unpack("<B", data[10:11])
    pos = 13 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)  # the global colour table
    frames = blocks = 0
    while True:
        blocks += 1
        if blocks > MAX_CHUNKS:
            return f"GIF of over {MAX_CHUNKS} blocks"
        block = data[pos]
        pos += 1
        if block == 0x3B:  # trailer
            break
        if block == 0x21:  # extension: a label, then sub-blocks
            pos = _gif_sub_blocks(data, pos + 1)
        elif block == 0x2C:  # image descriptor, local colour table, LZW code size, data
            (local,) = struct.unpack("<B", data[pos + 8:pos + 9])
            pos += 9 + (3 * (2 << (local & 7)) if local & 0x80 else 0)
            if not 2 <= data[pos] <= 11:
                return f"GIF image with an LZW code size of {data[pos]}"
            pos = _gif_sub_blocks(data, pos + 1)
            frames += 1
        else:
            return f"GIF: unknown block {block:#x} at {pos - 1}"
    if pos != len(data):
        return f"{len(data) - pos} bytes after the GIF trailer"
    return None if frames else "GIF without an image"


def _gif_sub_blocks(data: bytes, pos: int) -> int:
    """The position after the sub-blocks starting at `pos` (IndexError past the end)."""
    while True:
        size = data[pos]
        pos += 1 + size
        if size == 0:
            return pos
        if pos > len(data):
            raise IndexError("GIF sub-block runs past the end")
