"""safetensors files and sharded `*.index.json`: header-only checks, never the tensor data.

The `safetensors` library validates what it parses (offsets, gaps, trailing bytes, header size);
this module adds what it does not check: duplicate JSON keys (two parsers could see two different
headers), a length field larger than the file, zip/pickle/GGUF signatures hidden in the header
padding or after the data, dtype * shape vs byte span, and shard indexes.
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
from pathlib import Path, PurePosixPath
from typing import TypedDict, cast

from dflash_guard import rules
from dflash_guard.fileio import DuplicateKeyError, loads_json, read_json, read_regular
from dflash_guard.findings import Finding
from dflash_guard.pins.folder import IGNORED_DIRS
from dflash_guard.rules import Rule
from dflash_guard.scan.pickle.payloads import MAX_CHECKED, serialized_payload, too_large
from dflash_guard.severity import Severity

DETECTOR = "safetensors"
_DESERIALIZE_BELOW = 16 << 20  # bytes: read whole and validated in memory below this size
MAX_HEADER = 100 * 1024 * 1024  # the safetensors loader's own limit
_TAIL = 64 * 1024 + 22  # where a zip's end-of-central-directory record can start
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
_SIGNATURES = {
    b"PK\x03\x04": "zip local file header",
    b"PK\x05\x06": "zip end-of-central-directory record",
    b"GGUF": "GGUF magic",
    b"\x93NUMPY": "numpy array",
}
# Inside the JSON header only zip records matter (a zip reader looks for them anywhere); GGUF
# and numpy magics count only at byte 0, so the word "GGUF" in metadata is no polyglot.
_HEADER_SIGNATURES = {sig: what for sig, what in _SIGNATURES.items() if sig.startswith(b"PK")}


# `model.safetensors.index.json`, `pytorch_model.bin.index.json`, `model.pt.index.json`...
_WEIGHT_INDEX = re.compile(r"\.(safetensors|bin|pt|pth|ckpt|gguf|h5|msgpack)\.index\.json$")
# A backslash or a drive letter: a path outside the folder for a loader on Windows.
_UNSAFE_SHARD = re.compile(r"\\|^[A-Za-z]:|\x00")


class TensorEntry(TypedDict):
    """One tensor of the header, as `_entry_problem` accepted it."""

    dtype: str
    shape: list[int]
    data_offsets: list[int]


@dataclasses.dataclass(frozen=True)
class Header:
    """The tensor table of one safetensors file."""

    tensors: dict[str, TensorEntry]
    data_start: int

    @property
    def param_count(self) -> int:
        return sum(math.prod(entry.get("shape") or []) for entry in self.tensors.values())


class _Checker:
    def __init__(self, display: str) -> None:
        self.display = display
        self.findings: list[Finding] = []

    def add(self, rule: Rule, severity: Severity, message: str, member: str | None = None) -> None:
        self.findings.append(
            Finding.of(
                rule, self.display, message, severity=severity, member=member, detector=DETECTOR
            )
        )


def check_safetensors(path: Path, display: str) -> tuple[list[Finding], Header | None]:
    """Findings for one safetensors file, and its header when it could be read."""
    check = _Checker(display)
    try:
        header = _read_header(path, check)
    except OSError as error:
        check.add(rules.UNSCANNABLE, Severity.high, f"cannot read: {error}")
        return check.findings, None
    if header is not None and not any(f.severity >= Severity.high for f in check.findings):
        _library_check(path, check)
    return check.findings, header


def _read_header(path: Path, check: _Checker) -> Header | None:
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            check.add(rules.ST_TRUNCATED, Severity.high, "shorter than the 8-byte header length")
            return None
        (length,) = struct.unpack("<Q", prefix)
        if length > size - 8:
            check.add(
                rules.ST_LENGTH,
                Severity.high,
                f"header length {length} is larger than the file ({size} bytes)",
            )
            return None
        if length > MAX_HEADER:
            check.add(
                rules.ST_LENGTH,
                Severity.high,
                f"header of {length} bytes exceeds the 100 MB limit loaders enforce",
            )
            return None
        raw = handle.read(length)
        _polyglot(raw, "header", check, _HEADER_SIGNATURES)
        try:
            parsed = loads_json(raw, strict=True)
        except DuplicateKeyError as error:
            check.add(
                rules.ST_DUPLICATE_KEY,
                Severity.high,
                f"header has a {error}: parsers may disagree on which tensor it means",
            )
            return None
        except (UnicodeDecodeError, ValueError) as error:
            check.add(rules.ST_HEADER, Severity.high, f"header is not valid JSON: {error}")
            return None
        if not isinstance(parsed, dict):
            check.add(rules.ST_HEADER, Severity.high, "header is not a JSON object")
            return None
        tensors = _check_entries(parsed, check)
        data_start = 8 + length
        end = max((e["data_offsets"][1] for e in tensors.values()), default=0)
        data_end = data_start + end
        if data_end > size:
            check.add(
                rules.ST_TRUNCATED,
                Severity.high,
                f"tensor data ends at byte {data_end} but the file has {size}",
            )
        elif data_end < size:
            handle.seek(data_end)
            trailing = handle.read(min(size - data_end, 1 << 16))
            check.add(
                rules.ST_TRAILING, Severity.high, f"{size - data_end} bytes after the last tensor"
            )
            _polyglot(trailing, "trailing bytes", check)
        if size > _TAIL:
            handle.seek(size - _TAIL)
            if b"PK\x05\x06" in handle.read(_TAIL):
                check.add(
                    rules.ST_POLYGLOT,
                    Severity.high,
                    "a zip end-of-central-directory record near the end of the file: "
                    "it also opens as a zip (torch.load would read it)",
                )
    return Header(tensors, data_start)


def _check_entries(parsed: dict[str, object], check: _Checker) -> dict[str, TensorEntry]:
    tensors: dict[str, TensorEntry] = {}
    for name, entry in parsed.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in entry.items()
            ):
                check.add(
                    rules.ST_HEADER, Severity.high, "__metadata__ must map strings to strings"
                )
                continue
            if too_large(list(entry.values())):
                check.add(
                    rules.UNSCANNABLE,
                    Severity.high,
                    f"__metadata__ over {MAX_CHECKED} characters: not checked for payloads",
                )
                continue
            for key, value in entry.items():
                payload = serialized_payload(value)
                if payload:
                    check.add(
                        rules.ST_METADATA_PAYLOAD,
                        Severity.high,
                        f"__metadata__[{key!r}] carries {payload}",
                        member=f"__metadata__.{key}",
                    )
            continue
        problem = _entry_problem(entry)
        if problem:
            check.add(rules.ST_TENSOR, Severity.high, f"tensor {name!r}: {problem}")
            continue
        tensors[name] = cast(TensorEntry, entry)  # JSON, checked by _entry_problem
    return tensors


def _entry_problem(entry: object) -> str | None:
    if not isinstance(entry, dict):
        return "entry is not an object"
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BITS:
        return f"unknown dtype {dtype!r}"
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        return f"shape {shape!r} is not a list of non-negative integers"
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        return f"data_offsets {offsets!r} are not [begin, end] with 0 <= begin <= end"
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    span = offsets[1] - offsets[0]
    if bits % 8 or bits // 8 != span:
        return f"{dtype} {shape} needs {bits / 8:g} bytes but its data_offsets span {span}"
    return None


def _polyglot(
    data: bytes, where: str, check: _Checker, signatures: dict[bytes, str] = _SIGNATURES
) -> None:
    for signature, what in signatures.items():
        if signature in data:
            check.add(rules.ST_POLYGLOT, Severity.high, f"{what} signature inside the {where}")
    for protocol in range(2, 6):
        if bytes([0x80, protocol]) in data:  # never in valid UTF-8 JSON
            check.add(
                rules.ST_POLYGLOT,
                Severity.high,
                f"pickle protocol {protocol} signature inside the {where}",
            )
            break


def _library_check(path: Path, check: _Checker) -> None:
    """Let the safetensors loader validate the header and offsets (it reads no tensor data).

    A file under `_DESERIALIZE_BELOW` goes to `safetensors.deserialize` (the same validation on
    the bytes); a larger one is mapped by `safe_open`, which imports numpy (about 50 ms), a price
    a small folder's scan should not pay.
    """
    from safetensors import deserialize, safe_open

    try:
        if path.stat().st_size < _DESERIALIZE_BELOW:  # read no further, should it grow
            deserialize(read_regular(path, _DESERIALIZE_BELOW))  # type: ignore[no-untyped-call]
        else:
            with safe_open(str(path), framework="numpy") as handle:
                handle.keys()
    except Exception as error:  # noqa: BLE001 - the library raises its own error types
        check.add(rules.ST_INVALID, Severity.high, f"rejected by the safetensors loader: {error}")


def check_index(index_path: Path, display: str) -> list[Finding]:
    """A sharded checkpoint's `*.index.json` (safetensors', `pytorch_model.bin`'s, any other
    weight index): every shard present and inside the folder; for safetensors shards, every
    tensor in exactly one shard and present in that shard's header. Pickle shards are scanned
    as files of their own. A `*.index.json` without a `weight_map` whose name names no weight
    format is not a weight index and is left alone.
    """
    check = _Checker(display)
    try:
        index = read_json(index_path, strict=True)
    except OSError as error:
        check.add(rules.UNSCANNABLE, Severity.high, f"cannot read: {error}")
        return check.findings
    except ValueError as error:
        check.add(rules.ST_INDEX, Severity.high, f"not valid JSON (or a duplicate key): {error}")
        return check.findings
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if weight_map is None and not _WEIGHT_INDEX.search(index_path.name):
        return check.findings
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        check.add(rules.ST_INDEX, Severity.high, "no weight_map of tensor name -> shard file")
        return check.findings
    folder = index_path.parent
    shard_tensors: dict[str, set[str]] = {}
    for shard in sorted(set(weight_map.values())):
        pure = PurePosixPath(shard)
        if pure.is_absolute() or ".." in pure.parts or _UNSAFE_SHARD.search(shard) or not shard:
            check.add(
                rules.ST_INDEX_PATH,
                Severity.high,
                f"shard path {shard!r} points outside the checkpoint folder",
            )
            continue
        if any(part in IGNORED_DIRS for part in pure.parts):
            check.add(
                rules.ST_INDEX_PATH,
                Severity.high,
                f"shard path {shard!r} points into a .git or .cache folder, which loaders are not "
                "expected to read and the lock may leave out",
            )
            continue
        shard_path = folder / shard
        if not shard_path.is_file():
            check.add(rules.ST_INDEX_MISSING, Severity.high, f"shard {shard!r} is missing")
            continue
        if not shard.endswith(".safetensors"):
            continue  # a pickle or other shard: the walk scans it as a file of its own
        _, header = check_safetensors(shard_path, shard)  # its own findings come from its scan
        shard_tensors[shard] = set(header.tensors) if header else set()
    for tensor, shard in weight_map.items():
        if shard in shard_tensors and tensor not in shard_tensors[shard]:
            check.add(
                rules.ST_INDEX_TENSOR,
                Severity.high,
                f"tensor {tensor!r} is mapped to {shard!r} but that shard lacks it",
            )
    seen: dict[str, str] = {}
    for shard, names in sorted(shard_tensors.items()):
        for tensor in sorted(names):
            if tensor in seen:
                check.add(
                    rules.ST_INDEX_TENSOR,
                    Severity.high,
                    f"tensor {tensor!r} is in two shards ({seen[tensor]!r} and {shard!r})",
                )
            seen[tensor] = shard
            if tensor not in weight_map:
                check.add(
                    rules.ST_INDEX_TENSOR,
                    Severity.medium,
                    f"tensor {tensor!r} in {shard!r} is not listed in the index",
                )
    return check.findings
