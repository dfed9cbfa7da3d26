"""Pickle-family files: modelscan's denylist plus our own allowlist pass over every opcode.

A denylist names what is known to be dangerous and is bypassed by the next gadget nobody listed;
the allowlist pass walks every pickle stream with `pickletools.genops` (never unpickling), resolves
each global the stream would import (GLOBAL, INST, STACK_GLOBAL with its strings followed through
the stack and the memo, EXT*) and reports every one a state dict or a numpy array does not need.
Containers are opened the way loaders open them: torch zip checkpoints (every `.pkl` member), legacy
torch files (several consecutive pickles), `.npy` object arrays, `.npz` and other zips, nested zips.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import pickletools
import zipfile
from collections import Counter
from pathlib import Path
from typing import IO

from dflash_guard.scan import rules
from dflash_guard.scan.interface import Finding, Rule, Severity
from dflash_guard.scan.sniff import PICKLE_SUFFIXES, Format, sniff_bytes

DETECTOR = "pickle"

MAX_ZIP_DEPTH = 3
MAX_MEMBER_BYTES = 1 << 30  # an archive member is read into memory: a zip bomb stops here
_LEGACY_TORCH_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_TORCH_PICKLES = 5  # magic, protocol, sys_info, the object, the storage keys

_TORCH_STORAGES = [
    "Float",
    "Double",
    "Half",
    "BFloat16",
    "Long",
    "Int",
    "Short",
    "Char",
    "Byte",
    "Bool",
    "ComplexFloat",
    "ComplexDouble",
    "QUInt8",
    "QInt8",
    "QInt32",
    "QUInt4x2",
    "QUInt2x4",
    "Untyped",
]
_TORCH_DTYPES = [
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
    "float",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "uint16",
    "uint32",
    "uint64",
    "half",
    "double",
    "long",
    "int",
    "short",
]

# Everything a torch state dict or a numpy array legitimately needs to import.
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("collections", "OrderedDict"),
        ("torch._utils", "_rebuild_tensor"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_tensor_v3"),
        ("torch._utils", "_rebuild_parameter"),
        ("torch._utils", "_rebuild_parameter_with_state"),
        ("torch", "Size"),
        ("torch", "device"),
        ("torch", "UntypedStorage"),
        ("torch.storage", "UntypedStorage"),  # how float8 storages are saved
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("builtins", "bytearray"),
        ("__builtin__", "set"),
        ("__builtin__", "frozenset"),
        ("_codecs", "encode"),  # how protocols 0-2 spell a bytes object
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
    }
    | {("torch", f"{kind}Storage") for kind in _TORCH_STORAGES}
    | {("torch", dtype) for dtype in _TORCH_DTYPES}
)

# Modules whose import alone gives a pickle code execution, process, network or file access.
DANGEROUS_MODULES: frozenset[str] = frozenset(
    [
        "os",
        "posix",
        "nt",
        "subprocess",
        "sys",
        "runpy",
        "importlib",
        "code",
        "codeop",
        "pty",
        "socket",
        "shutil",
        "webbrowser",
        "timeit",
        "cProfile",
        "profile",
        "pydoc",
        "pickle",
        "_pickle",
        "dill",
        "cloudpickle",
        "marshal",
        "ctypes",
        "multiprocessing",
        "asyncio",
        "bdb",
        "pdb",
        "http",
        "urllib",
        "urllib2",
        "urllib3",
        "requests",
        "httpx",
        "httplib",
        "aiohttp",
        "ftplib",
        "smtplib",
        "telnetlib",
        "imaplib",
        "poplib",
        "nntplib",
        "tempfile",
        "types",
        "io",
        "_io",
        "_posixsubprocess",
        "signal",
        "threading",
        "_thread",
        "platform",
        "zipimport",
        "pkgutil",
        "glob",
        "linecache",
    ]
)
DANGEROUS_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        (builtins, name)
        for builtins in ("builtins", "__builtin__")
        for name in (
            [
                "eval",
                "exec",
                "compile",
                "open",
                "getattr",
                "setattr",
                "delattr",
                "__import__",
                "apply",
                "breakpoint",
                "input",
                "globals",
                "locals",
                "vars",
                "execfile",
                "file",
                "reload",
                "help",
            ]
        )
    }
    | {
        ("functools", "partial"),
        ("functools", "reduce"),
        ("_functools", "partial"),
        ("operator", "attrgetter"),
        ("operator", "methodcaller"),
        ("operator", "itemgetter"),
        ("_operator", "attrgetter"),
        ("_operator", "methodcaller"),
        ("numpy.testing._private.utils", "runstring"),
        ("torch", "load"),
        ("torch.serialization", "load"),
        ("logging", "FileHandler"),
    }
)

_STRING_OPCODES = frozenset(
    [
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
        "UNICODE",
        "BINUNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE8",
    ]
)
_GET_OPCODES = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPCODES = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MARK = object()
_OTHER = object()


def classify_global(module: str, name: str) -> Severity | None:
    """None for an allowlisted global, critical for a known-dangerous one, high otherwise."""
    if (module, name) in ALLOWED_GLOBALS:
        return None
    root = module.split(".", 1)[0]
    if (module, name) in DANGEROUS_GLOBALS or root in DANGEROUS_MODULES:
        return Severity.critical
    return Severity.high


@dataclasses.dataclass(frozen=True)
class PickleGlobal:
    """A callable or class a pickle stream imports when loaded."""

    module: str | None  # None: a STACK_GLOBAL whose strings could not be followed
    name: str | None
    opcode: str
    position: int | None


@dataclasses.dataclass
class StreamResult:
    """What one pickle stream (up to and including its STOP) contains."""

    globals: list[PickleGlobal]
    opcodes: int = 0
    error: str | None = None
    ints: list[int] = dataclasses.field(default_factory=list)
    builds_on_globals: list[str] = dataclasses.field(default_factory=list)


class _Malformed(ValueError):
    """The stream is not a pickle the unpickler would accept."""


def read_stream(stream: IO[bytes]) -> StreamResult:
    """Walk one pickle stream from the current position, collecting every imported global.

    Never raises: a malformed or truncated stream ends with `error` set, keeping what came before
    (the unpickler would already have run those opcodes).
    """
    result = StreamResult(globals=[])
    stack: list[object] = []
    memo: dict[int, object] = {}
    try:
        for op, arg, pos in pickletools.genops(stream):
            result.opcodes += 1
            _step(op, arg, pos, stack, memo, result)
            if op.name == "STOP":
                return result
        raise _Malformed("stream ends without STOP")
    except Exception as error:  # noqa: BLE001 - every malformed input becomes a finding
        result.error = f"{type(error).__name__}: {error}"
    return result


def _step(op, arg, pos, stack: list[object], memo: dict[int, object], result: StreamResult):
    """Apply one opcode's effect on a symbolic stack that keeps strings and marks."""
    name = op.name
    if name in _PUT_OPCODES or name == "MEMOIZE":
        if not stack:
            raise _Malformed(f"{name} on an empty stack")
        memo[arg if name != "MEMOIZE" else len(memo)] = stack[-1]
        return
    imported: PickleGlobal | None = None
    if name in ("GLOBAL", "INST"):
        module, _, attr = str(arg).partition(" ")
        imported = PickleGlobal(module, attr, name, pos)
    elif name == "STACK_GLOBAL":
        module, attr = (stack[-2], stack[-1]) if len(stack) >= 2 else (None, None)
        if isinstance(module, str) and isinstance(attr, str):
            imported = PickleGlobal(module, attr, name, pos)
        else:
            imported = PickleGlobal(None, None, name, pos)
    elif name.startswith("EXT"):
        imported = PickleGlobal(None, f"extension code {arg}", name, pos)
    elif isinstance(arg, int) and not isinstance(arg, bool):
        result.ints.append(arg)

    if imported is not None:
        result.globals.append(imported)
    if name == "BUILD" and len(stack) >= 2 and isinstance(stack[-2], PickleGlobal):
        target = stack[-2]
        result.builds_on_globals.append(f"{target.module}.{target.name}")

    before = op.stack_before
    if pickletools.markobject in before or (name == "POP" and stack and stack[-1] is _MARK):
        if _MARK not in stack:
            raise _Malformed(f"{name} without a MARK")
        del stack[len(stack) - 1 - stack[::-1].index(_MARK) :]
        to_pop = before.index(pickletools.markobject) if pickletools.markobject in before else 0
    else:
        to_pop = len(before)
    if len(stack) < to_pop:
        raise _Malformed(f"{name} pops {to_pop} items from a stack of {len(stack)}")
    popped = stack[len(stack) - to_pop :]
    del stack[len(stack) - to_pop :]

    after = op.stack_after
    if name in _STRING_OPCODES:
        stack.append(arg if isinstance(arg, str) else _OTHER)
    elif name in _GET_OPCODES:
        if arg not in memo:
            raise _Malformed(f"{name} of memo key {arg} never stored")
        stack.append(memo[arg])
    elif name in ("GLOBAL", "STACK_GLOBAL"):
        stack.append(imported)
    elif name == "DUP" and popped:
        stack.extend([popped[-1], popped[-1]])
    elif pickletools.markobject in after:
        stack.append(_MARK)
    else:
        stack.extend([_OTHER] * len(after))


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
    def pickles(self, stream: IO[bytes], member: str | None, *, from_extension: bool) -> None:
        """Every consecutive pickle in `stream` (legacy torch files hold five)."""
        first = read_stream(stream)
        if first.error and first.opcodes <= 1 and not first.globals:
            if from_extension:
                self.add(
                    rules.NOT_PICKLE,
                    Severity.low,
                    "has a pickle-family name but is not a pickle (nothing to load)",
                    member,
                )
            else:
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
        while first.error is None:
            if legacy and index >= _LEGACY_TORCH_PICKLES:
                break  # raw storage bytes follow; torch.load unpickles nothing more
            peek = _peek(stream, 2)
            more_legacy = legacy and index < _LEGACY_TORCH_PICKLES
            if not (more_legacy or (len(peek) == 2 and peek[0] == 0x80 and peek[1] <= 5)):
                break
            following = read_stream(stream)
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
            rule = (
                rules.PICKLE_DANGEROUS_GLOBAL
                if severity is Severity.critical
                else rules.PICKLE_GLOBAL
            )
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
        if result.error:
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
        self, stream: IO[bytes], size: int, member: str | None, depth: int, *, from_extension: bool
    ) -> None:
        """Scan a file or archive member by its content."""
        head = _peek(stream, 16)
        fmt = sniff_bytes(head, size, protocol0=from_extension)
        if fmt is Format.zip:
            self.zip(stream, member, depth)
        elif fmt is Format.numpy:
            self.numpy(stream, member)
        elif fmt is Format.pickle:
            self.pickles(stream, member, from_extension=from_extension)
        elif fmt is Format.archive:
            self.add(
                rules.UNSCANNABLE,
                Severity.high,
                "an archive format dflash-guard cannot open (7z, rar, gzip, xz, bzip2)",
                member,
            )
        elif from_extension:
            self.add(
                rules.NOT_PICKLE,
                Severity.low,
                "has a pickle-family name but is not a pickle, zip or numpy file",
                member,
            )

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
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as error:
            self.add(rules.UNSCANNABLE, Severity.high, f"cannot open zip: {error}", member)
            return
        with archive:
            names = [info.filename for info in infos]
            torch_zip = any(n == "data.pkl" or n.endswith("/data.pkl") for n in names)
            for info in infos:
                if info.is_dir():
                    continue
                inner = f"{member}:{info.filename}" if member else info.filename
                is_storage = torch_zip and not info.filename.endswith(".pkl")
                if is_storage:
                    continue  # raw tensor bytes, never unpickled by torch.load
                if info.flag_bits & 0x1:
                    self.add(
                        rules.UNSCANNABLE,
                        Severity.high,
                        "encrypted zip member: its content cannot be checked",
                        inner,
                    )
                    continue
                self.zip_member(archive, info, inner, depth)

    def zip_member(
        self, archive: zipfile.ZipFile, info: zipfile.ZipInfo, inner: str, depth: int
    ) -> None:
        try:
            data = _read_member(archive, info)
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
        from_extension = suffix in {".pkl", ".pickle", ".npy", ".bin", ".pt", ".pth", ".joblib"}
        self.blob(io.BytesIO(data), len(data), inner, depth + 1, from_extension=from_extension)

    def numpy(self, stream: IO[bytes], member: str | None) -> None:
        """A `.npy` array: only object arrays hold a pickle (after the header)."""
        import numpy as np

        fmt = np.lib.format
        try:
            version = fmt.read_magic(stream)
            if version == (1, 0):
                _shape, _order, dtype = fmt.read_array_header_1_0(stream)
            elif version == (2, 0):
                _shape, _order, dtype = fmt.read_array_header_2_0(stream)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except Exception as error:  # noqa: BLE001 - numpy raises many types on bad headers
            self.add(rules.UNSCANNABLE, Severity.high, f"invalid .npy header: {error}", member)
            return
        if dtype.hasobject:
            self.pickles(stream, member, from_extension=False)


class _CrcMismatch(Exception):
    def __init__(self, data: bytes) -> None:
        super().__init__("CRC mismatch")
        self.data = data


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The member's bytes; a CRC mismatch raises `_CrcMismatch` carrying the bytes anyway, and a
    member over `MAX_MEMBER_BYTES` raises `ValueError`."""
    try:
        with archive.open(info) as handle:
            return _read_capped(handle)
    except zipfile.BadZipFile as error:
        if "CRC" not in str(error):
            raise
    with archive.open(info) as handle:
        # Read again without the check, as a lenient loader would, so the content is scanned.
        handle._expected_crc = None  # zipfile's own switch for "no CRC to verify"
        raise _CrcMismatch(_read_capped(handle))


def _read_capped(handle: IO[bytes]) -> bytes:
    data = handle.read(MAX_MEMBER_BYTES + 1)
    if len(data) > MAX_MEMBER_BYTES:
        raise ValueError(f"it decompresses to over {MAX_MEMBER_BYTES} bytes")
    return data


def _peek(stream: IO[bytes], count: int) -> bytes:
    position = stream.tell()
    data = stream.read(count)
    stream.seek(position)
    return data


def _modelscan_findings(path: Path, display: str) -> list[Finding]:
    """modelscan's denylist verdict on one file (it picks formats by extension only)."""
    from modelscan.modelscan import ModelScan
    from modelscan.settings import DEFAULT_SETTINGS

    # modelscan logs every error it also returns; without a handler they would reach stderr.
    logging.getLogger("modelscan").setLevel(logging.CRITICAL)
    try:
        report = ModelScan(settings=DEFAULT_SETTINGS).scan(path)
    except Exception as error:  # noqa: BLE001 - a crash in modelscan must not hide our own pass
        return [
            Finding(
                rules.MODELSCAN_ERROR.id,
                Severity.low,
                display,
                f"modelscan failed: {type(error).__name__}: {error}",
                detector="modelscan",
            )
        ]
    findings = []
    for issue in report.get("issues", []):
        source = str(issue.get("source", ""))
        member = source.split(":", 1)[1] if ":" in source else None
        severity = Severity.parse(str(issue.get("severity", "high")))
        findings.append(
            Finding(
                rules.MODELSCAN.id,
                severity,
                display,
                f"modelscan: unsafe operator {issue.get('module')}.{issue.get('operator')}",
                member=member,
                detector="modelscan",
            )
        )
    for error in report.get("errors", []):
        findings.append(
            Finding(
                rules.MODELSCAN_ERROR.id,
                Severity.low,
                display,
                f"modelscan could not scan it ({error.get('description')}); the opcode pass did",
                detector="modelscan",
            )
        )
    return findings


_MODELSCAN_SUFFIXES = frozenset(
    {
        ".pkl",
        ".pickle",
        ".joblib",
        ".dill",
        ".dat",
        ".data",
        ".bin",
        ".pt",
        ".pth",
        ".ckpt",
        ".npy",
        ".zip",
        ".npz",
    }
)


def scan_pickle_file(path: Path, display: str) -> list[Finding]:
    """Findings for one pickle-family file: modelscan's denylist, then the allowlist pass."""
    from_extension = path.suffix.lower() in PICKLE_SUFFIXES
    scan = _Scan(display)
    try:
        with path.open("rb") as handle:
            scan.blob(handle, path.stat().st_size, None, 0, from_extension=from_extension)
    except OSError as error:
        scan.add(rules.UNSCANNABLE, Severity.high, f"cannot read: {error}", None)
    findings = scan.findings
    if path.suffix.lower() in _MODELSCAN_SUFFIXES:
        findings = _modelscan_findings(path, display) + findings
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
