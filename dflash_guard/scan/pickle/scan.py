"""Pickle-family files: modelscan's denylist plus our own allowlist pass over every opcode.

A denylist names what is known to be dangerous and is bypassed by the next gadget nobody listed;
the allowlist pass walks every pickle stream (`stream`, never unpickling), resolves each
global the stream would import (GLOBAL, INST, STACK_GLOBAL with its strings followed through the
stack and the memo, EXT*) and reports every one a state dict or a numpy array does not need; a
short list of harmless classes (training arguments, their enums) is a low finding for the policy.
Files are opened the way loaders open them, whatever their first byte: torch zip checkpoints
(every member torch could unpickle), legacy torch files (several consecutive pickles) and legacy
torch tar archives, joblib's compressed streams, `.npy` object arrays (format 1 to 3), `.npz` and
other zips, nested zips, pickles without PROTO and stacked pickles. A zip two readers could read
differently is a polyglot finding. The allowlists live in `globals`, the stream walk in
`stream`, the container helpers in `containers`.
"""

from __future__ import annotations

import copy
import io
import os
import re
import tarfile
import zipfile
from collections import Counter
from pathlib import Path
from typing import IO

from dflash_guard import rules
from dflash_guard.fileio import open_binary
from dflash_guard.findings import Finding
from dflash_guard.rules import Rule
from dflash_guard.scan.allowlist import npy_header
from dflash_guard.scan.pickle import containers
from dflash_guard.scan.pickle.globals import classify_global
from dflash_guard.scan.pickle.modelscan_pass import MODELSCAN_SUFFIXES, modelscan_findings
from dflash_guard.scan.pickle.stream import PickleGlobal, StreamResult, read_stream
from dflash_guard.scan.sniff import PICKLE_SUFFIXES, Format, sniff_bytes
from dflash_guard.severity import Severity

__all__ = ["PickleGlobal", "StreamResult", "classify_global", "read_stream", "scan_pickle_file"]

DETECTOR = "pickle"

MAX_ZIP_DEPTH = 3
MAX_MEMBER_BYTES = 1 << 30  # an archive member is read into memory: a zip bomb stops here
_LEGACY_TORCH_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_TORCH_PICKLES = 5  # magic, protocol, sys_info, the object, the storage keys

class _Scan:
    """Walks one file and its members, accumulating findings."""

    def __init__(self, display: str) -> None:
        self.display = display
        self.findings: list[Finding] = []
        self.streams = 0

    def add(self, rule: Rule, severity: Severity, message: str, member: str | None) -> None:
        self.findings.append(
            Finding.of(
                rule, self.display, message, severity=severity, member=member, detector=DETECTOR
            )
        )

    # -- pickles -------------------------------------------------------------------------------
    def pickles(
        self, stream: IO[bytes], member: str | None, *, from_extension: bool, probe: bool = False
    ) -> None:
        """Every consecutive pickle in `stream` (legacy torch files hold five, a loader may call
        `pickle.load` again and again). `probe`: a file of another format (text, say), reported
        only when an unpickler reads it as a pickle (`_unpickles`): its first stream parses to
        STOP, or it calls or imports something dangerous before the fault. A later stream
        carrying the payload is read either way."""
        first = read_stream(stream)
        if probe and not _unpickles(first):
            return  # text an unpickler fails on before it has run anything
        if first.error and not first.timed_out and first.opcodes <= 1 and not first.globals:
            if from_extension:
                self.add(
                    rules.NOT_PICKLE,
                    Severity.low,
                    "has a pickle-family name but is not a pickle (an unpickler fails at its "
                    f"first opcode: {first.error})",
                    member,
                )
            elif not probe:
                self.add(
                    rules.PICKLE_INVALID,
                    Severity.high,
                    f"pickle signature but no valid pickle stream ({first.error})",
                    member,
                )
            return
        self.report_stream(first, member, index=0, strict=True)
        legacy = _LEGACY_TORCH_MAGIC in first.ints
        index = 1
        while first.error is None and _peek(stream, 1):
            if legacy and index >= _LEGACY_TORCH_PICKLES:
                break  # raw storage bytes follow; torch.load unpickles nothing more
            more_legacy = legacy and index < _LEGACY_TORCH_PICKLES
            following = read_stream(stream)
            junk = following.error and following.opcodes <= 1 and not following.globals
            if junk and not more_legacy and not following.timed_out:
                break  # trailing bytes an unpickler fails on at once: nothing runs
            self.report_stream(following, member, index=index, strict=more_legacy)
            if following.error:
                break
            index += 1

    def report_stream(
        self, result: StreamResult, member: str | None, *, index: int, strict: bool
    ) -> None:
        self.streams += 1
        where = f"pickle #{index}" if index else "pickle"
        counts = Counter((g.module, g.name, g.opcode) for g in result.globals)
        for (module, name, opcode), count in counts.items():
            times = f" ({count}x)" if count > 1 else ""
            if module is None:
                self.add(
                    rules.PICKLE_UNRESOLVED_GLOBAL,
                    Severity.high,
                    f"{where}: {opcode} imports a global whose name is computed "
                    f"({name or 'not constant strings'}){times}",
                    member,
                )
                continue
            severity = classify_global(module, name or "")
            if severity is None:
                continue
            rule = {
                Severity.critical: rules.PICKLE_DANGEROUS_GLOBAL,
                Severity.low: rules.PICKLE_CLASS_GLOBAL,
            }.get(severity, rules.PICKLE_GLOBAL)
            self.add(
                rule,
                severity,
                f"{where}: {opcode} imports {module}.{name}{times}, which is not on the "
                "state-dict allowlist",
                member,
            )
        for target in sorted(set(result.builds_on_globals)):
            self.add(
                rules.PICKLE_BUILD_ON_GLOBAL,
                Severity.high,
                f"{where}: BUILD sets attributes on the imported {target} itself "
                "(rewrites a class or module at load time)",
                member,
            )
        if result.timed_out:
            self.add(rules.UNSCANNABLE, Severity.high, f"{where}: {result.error}", member)
        elif result.error:
            if strict:
                self.add(
                    rules.PICKLE_INVALID,
                    Severity.high,
                    f"{where} is truncated or malformed ({result.error}); an unpickler "
                    "runs the opcodes before the fault",
                    member,
                )
            else:
                self.add(
                    rules.PICKLE_TRAILING,
                    Severity.low,
                    f"bytes after the last pickle look like a broken pickle ({result.error})",
                    member,
                )

    # -- containers ----------------------------------------------------------------------------
    def blob(
        self,
        stream: IO[bytes],
        size: int,
        member: str | None,
        depth: int,
        *,
        from_extension: bool,
        probe: bool = False,
    ) -> None:
        """Scan a file or archive member by its content, the way the loaders would open it."""
        head = _peek(stream, 512)
        fmt = sniff_bytes(head, size, protocol0=from_extension)
        if fmt is Format.zip:
            self.zip(stream, member, depth)
            return
        if fmt is Format.numpy:
            self.numpy(stream, member)
            return
        if containers.is_tar(head):  # torch.load tries tarfile first on every file
            self.tar(stream, member, depth, probe=probe and not from_extension)
            stream.seek(0)
            self.pickles(stream, member, from_extension=False, probe=True)
            return
        kind = containers.compression(head)
        if kind and (from_extension or probe or fmt is Format.archive):
            quiet = probe and not from_extension and fmt is not Format.archive
            self.compressed(stream, kind, member, depth, probe=quiet)
            return
        if fmt is Format.archive:
            self.add(
                rules.UNSCANNABLE,
                Severity.high,
                "an archive format dflash-guard cannot open (7z, rar)",
                member,
            )
            return
        if fmt is Format.pickle or from_extension or probe:
            start = stream.tell()
            quiet = probe and not from_extension and fmt is not Format.pickle
            self.pickles(stream, member, from_extension=from_extension, probe=quiet)
            stream.seek(start)
            if zipfile.is_zipfile(stream):
                self.add(
                    rules.ZIP_POLYGLOT,
                    Severity.high,
                    "does not start as a zip but also opens as one (an end record at its end): "
                    "torch.load and zipfile-based loaders read different content",
                    member,
                )
                self.zip(stream, member, depth)

    def nested(self, data: bytes, member: str, depth: int, *, probe: bool = False) -> None:
        """A member or decompressed stream, scanned as a pickle-family file of its own (or, for
        `probe`, only reported when it turns out to hold a pickle)."""
        if depth >= MAX_ZIP_DEPTH:
            self.add(
                rules.UNSCANNABLE, Severity.high, f"nested deeper than {MAX_ZIP_DEPTH} levels",
                member,
            )
            return
        self.blob(
            io.BytesIO(data), len(data), member, depth + 1, from_extension=not probe, probe=probe
        )

    def compressed(
        self, stream: IO[bytes], kind: str, member: str | None, depth: int, *, probe: bool
    ) -> None:
        """A joblib-style compressed stream: decompressed (capped) and scanned. `probe`: a file
        with another name, silent unless it decompresses to a pickle."""
        inner = f"{member}:{kind}" if member else kind
        if kind == "lz4" and not containers.lz4_available():
            if probe:
                return
            self.add(
                rules.UNSCANNABLE,
                Severity.high,
                "lz4-compressed (joblib opens it) and the lz4 package is not installed",
                member,
            )
            return
        try:
            data = containers.decompress(stream, kind)
        except Exception as error:  # noqa: BLE001 - each codec raises its own types
            if probe and not isinstance(error, containers.TooLarge):
                return
            self.add(
                rules.UNSCANNABLE,
                Severity.high,
                f"{kind}-compressed stream cannot be decompressed: {error}",
                member,
            )
            return
        self.nested(data, inner, depth, probe=probe)

    def tar(self, stream: IO[bytes], member: str | None, depth: int, *, probe: bool) -> None:
        """torch's legacy tar format: torch unpickles its `storages`, `tensors` and `pickle`."""
        try:
            for name, data in containers.tar_members(stream):
                self.nested(data, f"{member}:{name}" if member else name, depth, probe=probe)
        except (tarfile.TarError, containers.TooLarge, OSError, EOFError) as error:
            if not probe:
                self.add(rules.UNSCANNABLE, Severity.high, f"cannot read tar: {error}", member)

    def zip(self, stream: IO[bytes], member: str | None, depth: int) -> None:
        if depth >= MAX_ZIP_DEPTH:
            self.add(
                rules.UNSCANNABLE,
                Severity.high,
                f"zip nested deeper than {MAX_ZIP_DEPTH} levels",
                member,
            )
            return
        try:
            archive = zipfile.ZipFile(stream)
            infos = archive.infolist()
            if len(infos) > containers.MAX_MEMBERS:
                raise containers.TooLarge(f"over {containers.MAX_MEMBERS} members")
            problems = containers.zip_disagreements(stream, archive)
        except (
            zipfile.BadZipFile,
            containers.TooLarge,
            OSError,
            ValueError,
            EOFError,
            NotImplementedError,
        ) as error:
            self.add(rules.UNSCANNABLE, Severity.high, f"cannot open zip: {error}", member)
            return
        for problem in problems:
            self.add(rules.ZIP_POLYGLOT, Severity.high, f"zip readers disagree: {problem}", member)
        with archive:
            names = [info.filename.lower() for info in infos]
            # torch's reader (miniz) finds `<archive>/data.pkl` ignoring case
            torch_zip = any(n == "data.pkl" or n.endswith("/data.pkl") for n in names)
            for info in infos:
                if info.is_dir():
                    continue
                inner = f"{member}:{info.filename}" if member else info.filename
                lowered = info.filename.lower()
                if torch_zip and _TORCH_STORAGE.fullmatch(lowered) and not lowered.endswith(".pkl"):
                    continue  # raw tensor bytes, never unpickled by torch.load
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    self.add(rules.UNSCANNABLE, Severity.high,
                             "zip member is a symbolic link: an extracting loader follows it",
                             inner)
                    continue
                if info.flag_bits & 0x1:
                    self.add(
                        rules.UNSCANNABLE,
                        Severity.high,
                        "encrypted zip member: its content cannot be checked",
                        inner,
                    )
                    continue
                self.zip_member(archive, stream, info, inner, depth)

    def zip_member(
        self,
        archive: zipfile.ZipFile,
        stream: IO[bytes],
        info: zipfile.ZipInfo,
        inner: str,
        depth: int,
    ) -> None:
        try:
            data = _read_member(archive, stream, info)
        except _CrcMismatch as error:
            self.add(
                rules.ZIP_CRC,
                Severity.high,
                "zip member fails its CRC check: loaders that skip the check would read "
                "bytes other tools do not",
                inner,
            )
            data = error.data
        except (
            zipfile.BadZipFile,
            OSError,
            ValueError,
            EOFError,
            NotImplementedError,
            RuntimeError,
            zipfile.LargeZipFile,
        ) as error:
            self.add(rules.UNSCANNABLE, Severity.high, f"cannot read zip member: {error}", inner)
            return
        suffix = Path(info.filename).suffix.lower()
        from_extension = suffix in PICKLE_SUFFIXES
        self.blob(
            io.BytesIO(data), len(data), inner, depth + 1, from_extension=from_extension, probe=True
        )

    def numpy(self, stream: IO[bytes], member: str | None) -> None:
        """A `.npy` array (format 1.0, 2.0 or 3.0): only object arrays hold a pickle."""
        try:
            _version, _shape, dtype = npy_header(stream)
        except ValueError as error:
            self.add(rules.UNSCANNABLE, Severity.high, str(error), member)
            return
        if dtype.hasobject:
            self.pickles(stream, member, from_extension=False)


# The members of a torch zip that hold raw tensor bytes: `<archive>/data/<key>` and small
# metadata files; torch never unpickles them, and anything else in the archive is scanned.
_TORCH_STORAGE = re.compile(
    r"[^/]*/(data/[^/]+|version|byteorder|\.data/version|\.data/serialization_id"
    r"|\.format_version|\.storage_alignment)"
)


class _CrcMismatch(Exception):
    def __init__(self, data: bytes) -> None:
        super().__init__("CRC mismatch")
        self.data = data


def _read_member(archive: zipfile.ZipFile, stream: IO[bytes], info: zipfile.ZipInfo) -> bytes:
    """The member's bytes as a lenient reader sees them: a local header naming it differently
    is followed (torch's reader ignores that name), a CRC mismatch raises `_CrcMismatch` carrying
    the bytes anyway, and a member over `MAX_MEMBER_BYTES` raises `ValueError`."""
    local = containers.local_header(stream, info.header_offset)
    if local is not None:
        encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
        local_name = local[0].decode(encoding, errors="replace")
        if local_name != info.orig_filename:
            info = copy.copy(info)
            info.orig_filename = local_name  # what zipfile compares the local header with
    try:
        with archive.open(info) as handle:
            return _read_capped(handle)
    except zipfile.BadZipFile as error:
        if "CRC" not in str(error):
            raise
    with archive.open(info) as handle:
        # Read again without the check, as a lenient loader would, so the content is scanned.
        # zipfile's own switch for "no CRC to verify"; private, so typeshed does not declare it
        handle._expected_crc = None  # type: ignore[attr-defined]
        raise _CrcMismatch(_read_capped(handle))


def _read_capped(handle: IO[bytes]) -> bytes:
    data = handle.read(MAX_MEMBER_BYTES + 1)
    if len(data) > MAX_MEMBER_BYTES:
        raise ValueError(f"it decompresses to over {MAX_MEMBER_BYTES} bytes")
    return data


# Modules whose import alone runs something: transformers' cache of Hub code (another repo's
# unreviewed modules, importable once loaded) and the standard library's import-time toys.
_IMPORT_RUNS_CODE = frozenset({"transformers_modules", "antigravity", "this", "idlelib"})


def _unpickles(result: StreamResult) -> bool:
    """Whether an unpickler given this stream runs something: it parses to STOP (a complete
    pickle, whose following streams a loader reads too), calls an object before its fault, or
    imports a global the allowlist calls dangerous or a module whose import runs code
    (`_IMPORT_RUNS_CODE`). Text that merely starts with an opcode letter (`checkpoint: x`
    reads as GLOBAL `heckpoint: x`) faults before any of these."""
    if result.complete or result.timed_out or result.calls:
        return True
    return any(g.module is not None and (
        classify_global(g.module, g.name or "") is Severity.critical
        or g.module.split(".")[0] in _IMPORT_RUNS_CODE) for g in result.globals)


def _peek(stream: IO[bytes], count: int) -> bytes:
    position = stream.tell()
    data = stream.read(count)
    stream.seek(position)
    return data


def scan_pickle_file(path: Path, display: str, *, probe: bool = False) -> list[Finding]:
    """Findings for one pickle-family file: modelscan's denylist, then the allowlist pass.

    `probe`: the file has another format or none (a loader could still `torch.load` or
    `pickle.load` it): nothing is reported unless it holds a pickle that imports something, a
    tar torch would open or a zip hidden after its start.
    """
    from_extension = path.suffix.lower() in PICKLE_SUFFIXES
    scan = _Scan(display)
    try:
        with open_binary(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            scan.blob(handle, size, None, 0, from_extension=from_extension, probe=probe)
    except OSError as error:
        scan.add(rules.UNSCANNABLE, Severity.high, f"cannot read: {error}", None)
    findings = scan.findings
    if path.suffix.lower() in MODELSCAN_SUFFIXES:
        findings = modelscan_findings(path, display) + findings
    if scan.streams:
        findings.append(
            Finding(
                rules.PICKLE_PRESENT.id,
                Severity.low,
                display,
                f"holds {scan.streams} pickle stream(s): loading it runs a "
                "pickle, even with only allowlisted globals",
                detector=DETECTOR,
            )
        )
    return findings
