"""An installed Python distribution (z-lab's `dflash` client first) against the lock that pins
it: its files against its RECORD, its RECORD against the locked wheel's when that wheel is at
hand, and its code through the capability report remote code gets.

What it proves, and what it cannot:
- Every file RECORD lists is there, with RECORD's size and sha256 (or stronger; md5 and sha1 are
  refused). Files RECORD gives no hash for fail, except RECORD itself and bytecode.
- Bytecode (`__pycache__/*.pyc`, listed or not: RECORD never hashes what the installer compiled)
  must be what compiling its hashed source here gives, byte for byte after the header: Python
  runs a `.pyc` instead of its source when the header matches, so a `.pyc` is code like any
  other. It is compiled (`compile`, which runs nothing), never loaded.
- Files in the distribution's own folders (its `.dist-info`, and each top-level folder holding
  its Python code) that RECORD does not list fail (`extra`): a module dropped beside the others
  is imported like them.
- Without the locked wheel, all of that only says the install agrees with itself: whoever can
  write the files can write RECORD too (RECORD-only). That is "cannot tell" (exit 1), never OK:
  nothing was compared with the sha256 the lock pins. With a wheel whose sha256 the lock pins
  (`--wheel`, a wheelhouse folder, or pip's cache), every RECORD row the wheel ships must carry
  the wheel's own hash, every file the wheel ships must be installed, and the installer's own
  additions are listed (launcher scripts, INSTALLER, REQUESTED, direct_url.json): those the wheel
  cannot vouch for.
- The capability report is the remote-code scanner's (`scan/code`): a review aid that
  sees what `ast` can resolve, not a verdict; it does not change the exit code.

Not seen: files of the distribution installed outside its own folders and not in RECORD, `.pth`
files other distributions wrote, and anything a namespace folder shared with another
distribution holds (listed as `extra`: that fails closed).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import dataclasses
import email.parser
import hashlib
import importlib.util
import io
import itertools
import marshal
import os
import sys
import warnings
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from dflash_guard import rules
from dflash_guard.errors import InputError
from dflash_guard.fileio import open_binary, read_regular
from dflash_guard.findings import Finding
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.pins.lockfile import Lockfile, Package
from dflash_guard.scan.code import remote_code

RECORD_MAX_BYTES = 16 * 1024 * 1024
RECORD_MAX_ROWS = 100_000
METADATA_MAX_BYTES = 4 * 1024 * 1024
CODE_MAX_BYTES = 16 * 1024 * 1024  # a .py or .pyc larger is not read: a problem, not a pass
HASH_MAX_BYTES = 64 * 1024 ** 3  # all files RECORD names together (the largest wheels: ~5 GiB)
WALK_MAX_ENTRIES = 100_000
WALK_MAX_DEPTH = 32
SEARCH_MAX_ENTRIES = 100_000  # entries of one site folder looked at for the .dist-info
WHEEL_MAX_MEMBERS = 100_000
STRONG_HASHES = ("sha256", "sha384", "sha512")
INSTALLER_FILES = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")
CAPABILITY_RULES = {rules.RC_NETWORK.id: "network", rules.RC_PROCESS.id: "process",
                    rules.RC_CREDENTIALS.id: "credentials"}


@dataclasses.dataclass(frozen=True)
class RecordRow:
    """One line of a RECORD file: a path, its `ALGO=urlsafe-b64` hash and its size, when given."""

    path: str
    hash: str | None
    size: int | None


@dataclasses.dataclass(frozen=True)
class FileProblem:
    """A file of the install the check could not prove."""

    path: str
    kind: str  # missing, modified, size, unhashed, weak-hash, extra, bytecode, not-in-wheel...
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "kind": self.kind, "detail": self.detail}


@dataclasses.dataclass(frozen=True)
class CodeReport:
    """One code file of the install and the scanner's findings on it."""

    path: str
    sha256: str
    findings: tuple[Finding, ...]

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "sha256": self.sha256,
                "findings": [f.to_json() for f in self.findings]}


@dataclasses.dataclass(frozen=True)
class InstalledCheck:
    """The verdict on one installed distribution (`Report`): exit 0 when every file proved out."""

    name: str
    version: str
    locked_version: str
    dist_info: str
    files_checked: int
    problems: tuple[FileProblem, ...]
    wheel: str | None  # the locked wheel the RECORD was compared with; None: RECORD-only
    wheel_note: str
    installer_files: tuple[str, ...]  # installed, not in the wheel (with a wheel only)
    code: tuple[CodeReport, ...]

    @property
    def passed(self) -> bool:
        """Every file proved out against the locked wheel. RECORD-only (no locked wheel at
        hand) is "cannot tell", not a pass: whoever wrote the files could write RECORD too."""
        return not self.problems and self.wheel is not None

    @property
    def verdict(self) -> str:
        """`ok`, `mismatch` (a file problem) or `cannot-tell` (no locked wheel to compare)."""
        if self.problems:
            return "mismatch"
        return "ok" if self.wheel is not None else "cannot-tell"

    def capabilities(self) -> dict[str, list[str]]:
        """`network`, `process`, `credentials` -> the `FILE:LINE` places the scanner saw."""
        found: dict[str, list[str]] = {kind: [] for kind in CAPABILITY_RULES.values()}
        for report in self.code:
            for finding in report.findings:
                if kind := CAPABILITY_RULES.get(finding.rule_id):
                    found[kind].append(f"{report.path}:{finding.line or '?'}")
        return found

    def to_json(self) -> dict[str, object]:
        return {"passed": self.passed, "verdict": self.verdict, "name": self.name,
                "version": self.version,
                "locked_version": self.locked_version, "dist_info": self.dist_info,
                "files_checked": self.files_checked,
                "problems": [p.to_json() for p in self.problems],
                "proof": "wheel" if self.wheel else "record-only", "wheel": self.wheel,
                "wheel_note": self.wheel_note, "installer_files": list(self.installer_files),
                "capabilities": self.capabilities(), "code": [c.to_json() for c in self.code]}


def check_installed(lock: Lockfile, name: str, *, paths: Iterable[Path] | None = None,
                    wheels: Iterable[Path] = (), scan_code: bool = True) -> InstalledCheck:
    """Check the installed distribution `name` (found in `paths`, default `sys.path`) against
    the package `lock` pins, with the locked wheel among `wheels` when there is one; without
    `scan_code` the capability report (a review aid, no verdict) is left out."""
    package = locked_package(lock, name)
    dist_info = find_dist_info(name, [Path(p) for p in sys.path if p] if paths is None
                               else list(paths))
    version = _metadata_version(dist_info)
    site = dist_info.parent
    rows = read_record(read_regular(dist_info / "RECORD", RECORD_MAX_BYTES),
                       f"{dist_info}/RECORD")
    problems: list[FileProblem] = []
    if _version(version) != _version(package.version):
        problems.append(FileProblem(dist_info.name, "version",
                                    f"installed {version}, the lock pins {package.version}"))
    record_path = f"{dist_info.name}/RECORD"
    listed = {_key(site, row.path): row for row in rows}
    verified: dict[str, str] = {}  # absolute path -> sha256 hex, of every file that proved out
    _refuse_oversized(site, rows)
    for row in rows:
        problem = _check_row(site, row, record_path, verified)
        if problem is not None:
            problems.append(problem)
    own = list(_own_files(site, rows, dist_info.name))
    for path in own:
        if _key(site, path) not in listed and not path.endswith(".pyc"):
            problems.append(FileProblem(path, "extra", "on disk in the distribution's folders, "
                                        "not in RECORD"))
    for path in sorted({p for p in (*(r.path for r in rows), *own) if p.endswith(".pyc")}):
        if (site / path).exists() and (problem := _check_bytecode(site, path, verified)):
            problems.append(problem)
    wheel, note, installer = _against_wheel(package, dist_info.name, rows, list(wheels),
                                            problems)
    code = tuple(_scan(site, row.path, verified) for row in rows
                 if scan_code and _is_code(site, row.path))
    return InstalledCheck(canonicalize_name(name), version, package.version, str(dist_info),
                          len(rows), tuple(problems), wheel, note, installer,
                          tuple(c for c in code if c is not None))


def locked_package(lock: Lockfile, name: str) -> Package:
    """The package `lock` pins under `name` (names compared as PyPI compares them)."""
    wanted = canonicalize_name(name)
    for package in lock.packages:
        if canonicalize_name(package.name) == wanted:
            return package
    raise InputError(f"the lockfile pins no package {name!r}: lock it with --package "
                     f"{name}==VERSION@sha256:HEX (the wheel's), then check it")


def find_dist_info(name: str, paths: list[Path]) -> Path:
    """The `.dist-info` folder of `name` in the first of `paths` holding one, the way
    `importlib.metadata.distribution` picks it; two in one folder are refused."""
    wanted = canonicalize_name(name)
    for folder in paths:
        try:
            entries = list(itertools.islice(os.scandir(folder), SEARCH_MAX_ENTRIES))
        except OSError:
            continue
        found = [Path(e.path) for e in entries if e.name.endswith(".dist-info") and e.is_dir()
                 and canonicalize_name(e.name.partition("-")[0]) == wanted]
        if len(found) > 1:
            raise InputError(f"{folder}: {len(found)} installs of {name} "
                             f"({', '.join(sorted(p.name for p in found))}): remove the stale one")
        if found:
            return found[0]
    raise InputError(f"{name} is not installed in {', '.join(map(str, paths)) or 'any folder'}"
                     " (--path names the site-packages folder of another environment)")


def read_record(data: bytes, source: str) -> list[RecordRow]:
    """The rows of a RECORD file, read with `csv` as installers write it (PEP 376/627)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{source}: not UTF-8") from None
    rows: list[RecordRow] = []
    for number, fields in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        if number > RECORD_MAX_ROWS:
            raise InputError(f"{source}: more than {RECORD_MAX_ROWS:,} rows")
        if not fields:
            continue
        if len(fields) != 3 or not fields[0] or "\0" in fields[0]:
            raise InputError(f"{source}:{number}: expected PATH,HASH,SIZE")
        path, digest, size = fields
        if size and not size.isdigit():
            raise InputError(f"{source}:{number}: size {size!r} is not a number")
        rows.append(RecordRow(path, digest or None, int(size) if size else None))
    return rows


def _key(site: Path, path: str) -> str:
    """A RECORD path as one absolute, normalised path (a path RECORD lists twice, spelled two
    ways, is one file)."""
    return os.path.normpath(site / path)


def _refuse_oversized(site: Path, rows: list[RecordRow]) -> None:
    """Hashing is bounded: RECORD may name any file (`../`, absolute paths), so the total size
    of what it names is checked before a byte is read."""
    total = 0
    for row in rows:
        with contextlib.suppress(OSError):
            total += Path(_key(site, row.path)).stat().st_size
    if total > HASH_MAX_BYTES:
        raise InputError(f"{site}: RECORD names {total:,} bytes of files, more than "
                         f"{HASH_MAX_BYTES:,}")


def _check_row(site: Path, row: RecordRow, record_path: str,
               verified: dict[str, str]) -> FileProblem | None:
    location = Path(_key(site, row.path))
    if row.hash is None:
        if row.path == record_path or row.path.endswith(".pyc"):
            return None  # RECORD cannot hash itself; bytecode is checked by compiling
        return FileProblem(row.path, "unhashed", "RECORD gives no hash for it")
    algorithm, _, expected = row.hash.partition("=")
    if algorithm not in STRONG_HASHES:
        return FileProblem(row.path, "weak-hash",
                           f"RECORD hashes it with {algorithm!r} (sha256 or stronger needed)")
    try:
        size = location.stat().st_size
        actual = (sha256_file(location) if algorithm == "sha256"
                  else _hash_file(location, algorithm))
    except FileNotFoundError:
        return FileProblem(row.path, "missing", "RECORD lists it; it is not on disk")
    except (InputError, OSError) as error:
        return FileProblem(row.path, "unreadable", str(error))
    if row.size is not None and size != row.size:
        return FileProblem(row.path, "size", f"{size:,} bytes, RECORD says {row.size:,}")
    if _b64(bytes.fromhex(actual)) != expected:
        return FileProblem(row.path, "modified", f"{algorithm} differs from RECORD's")
    verified[str(location)] = actual if algorithm == "sha256" else sha256_file(location)
    return None


def _hash_file(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open_binary(path) as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _own_files(site: Path, rows: list[RecordRow], dist_info: str) -> Iterator[str]:
    """Every file under the distribution's own folders (its `.dist-info`, and each top-level
    folder of `site` holding its Python code: a `bin/` that `pip --target` shares is not one),
    as a RECORD-style path; bounded in entries and depth."""
    tops = sorted({dist_info} | {PurePosixPath(r.path).parts[0] for r in rows
                                 if len(PurePosixPath(r.path).parts) > 1 and r.path.endswith(".py")
                                 and not r.path.startswith(("/", ".."))})
    seen = 0
    for top in tops:
        if not (site / top).is_dir() or (site / top).is_symlink():
            continue
        for folder, dirs, files in os.walk(site / top):
            depth = len(Path(folder).relative_to(site).parts)
            if depth > WALK_MAX_DEPTH:
                raise InputError(f"{folder}: nested more than {WALK_MAX_DEPTH} folders deep")
            dirs.sort()
            for name in sorted(files):
                seen += 1
                if seen > WALK_MAX_ENTRIES:
                    raise InputError(f"{site / top}: more than {WALK_MAX_ENTRIES:,} files")
                yield Path(folder, name).relative_to(site).as_posix()


def _check_bytecode(site: Path, path: str, verified: dict[str, str]) -> FileProblem | None:
    """A `.pyc` must be what this interpreter compiles from its source, which must have proved
    out against RECORD: compared after the 16-byte header (flags included)."""
    pyc = Path(_key(site, path))
    try:
        source = Path(importlib.util.source_from_cache(str(pyc)))
    except ValueError:
        return FileProblem(path, "bytecode", "not in a __pycache__ folder beside a source")
    tag = sys.implementation.cache_tag
    if tag is None or f".{tag}." not in pyc.name:
        return FileProblem(path, "bytecode", f"compiled for another interpreter than {tag}: "
                           "cannot be checked here (delete it, or check with that Python)")
    if str(source) not in verified:
        return FileProblem(path, "bytecode", f"its source {source.name} did not prove out "
                           "against RECORD")
    try:
        data = read_regular(pyc, CODE_MAX_BYTES)
        text = read_regular(source, CODE_MAX_BYTES)
    except (InputError, OSError) as error:
        return FileProblem(path, "bytecode", f"cannot read it: {error}")
    if hashlib.sha256(text).hexdigest() != verified[str(source)]:
        return FileProblem(path, "bytecode", f"its source {source.name} changed while checked")
    optimize = 2 if ".opt-2." in pyc.name else 1 if ".opt-1." in pyc.name else 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = compile(text, str(source), "exec", dont_inherit=True, optimize=optimize)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        return FileProblem(path, "bytecode", f"its source does not compile: {error}")
    if data[:4] != importlib.util.MAGIC_NUMBER or data[16:] != marshal.dumps(code):
        return FileProblem(path, "bytecode", f"differs from compiling {source.name} here "
                           "(Python runs it instead of the source): delete the __pycache__ "
                           "folder, or reinstall")
    return None


def _is_code(site: Path, path: str) -> bool:
    """A Python source: `.py`, or a launcher script (`#!...python`) the installer wrote."""
    if path.endswith(".py"):
        return True
    if not path.startswith(("..", "/")):
        return False
    try:
        head = read_regular(Path(_key(site, path)), CODE_MAX_BYTES)[:128]
    except (InputError, OSError):
        return False
    return head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]


def _scan(site: Path, path: str, verified: dict[str, str]) -> CodeReport | None:
    location = Path(_key(site, path))
    if str(location) not in verified:
        return None  # a problem already: its bytes are not the ones RECORD names
    try:
        source = read_regular(location, CODE_MAX_BYTES)
    except (InputError, OSError):
        return None
    findings = [f for f in remote_code.check_source(source, path)
                if f.rule_id != rules.RC_UNREVIEWED.id]
    return CodeReport(path, verified[str(location)], tuple(findings))


def _against_wheel(package: Package, dist_info: str, rows: list[RecordRow],
                   wheels: list[Path], problems: list[FileProblem],
                   ) -> tuple[str | None, str, tuple[str, ...]]:
    """Compare the installed RECORD with the RECORD of the locked wheel among `wheels`."""
    wheel = _locked_wheel(package, wheels)
    if wheel is None:
        return None, ("RECORD-only: no wheel whose sha256 the lock pins was found (--wheel, "
                      "--wheelhouse, pip's cache): the files agree with RECORD, and RECORD "
                      "with nothing the lock pins"), ()
    shipped = {row.path: row for row in _wheel_record(wheel)}
    installed = {row.path: row for row in rows}
    for path, row in shipped.items():
        if row.hash is None or ".data/" in path:  # .data/ files install elsewhere
            continue
        mine = installed.get(path)
        if mine is None:
            problems.append(FileProblem(path, "not-installed", "the locked wheel ships it; "
                                        "RECORD does not list it"))
        elif mine.hash != row.hash:
            problems.append(FileProblem(path, "not-the-wheel's", "RECORD's hash is not the "
                                        "locked wheel's"))
    data_hashes = {row.hash for path, row in shipped.items() if ".data/" in path}
    extra: list[str] = []
    for path, row in installed.items():
        if path in shipped or path.endswith(".pyc") or (row.hash and row.hash in data_hashes):
            continue
        installer_metadata = (path.startswith(f"{dist_info}/")
                              and path.rpartition("/")[2] in INSTALLER_FILES)
        if installer_metadata or path.startswith(("..", "/")):  # or a launcher script
            extra.append(path)
        else:
            problems.append(FileProblem(path, "not-in-wheel", "RECORD lists it; the locked "
                                        "wheel does not ship it"))
    return (str(wheel), f"RECORD compared with the locked wheel {wheel.name}",
            tuple(sorted(extra)))


def _locked_wheel(package: Package, wheels: list[Path]) -> Path | None:
    """The first of `wheels` whose sha256 the lock pins: a `.whl` named for the package, or a
    file of pip's HTTP cache (`*.body`, named by URL) that is a wheel holding its RECORD."""
    wanted = canonicalize_name(package.name)
    for wheel in wheels:
        if wheel.suffix == ".body":
            if not _holds_dist_info(wheel, package):
                continue
        else:
            try:
                name, version, _, _ = parse_wheel_filename(wheel.name)
            except InvalidWheelFilename:
                continue
            if name != wanted or _version(str(version)) != _version(package.version):
                continue
        try:
            if sha256_file(wheel) in package.sha256:
                return wheel
        except InputError:
            continue
    return None


def _holds_dist_info(path: Path, package: Package) -> bool:
    """Whether `path` is a zip whose directory names `NAME-VERSION.dist-info/RECORD` (its
    central directory only is read)."""
    try:
        with open_binary(path) as handle:
            if handle.read(4) != b"PK\x03\x04":
                return False
            with zipfile.ZipFile(handle) as archive:
                names = archive.namelist()[:WHEEL_MAX_MEMBERS]
    except (zipfile.BadZipFile, InputError, OSError):
        return False
    wanted = canonicalize_name(package.name)
    for name in names:
        folder, _, leaf = name.partition("/")
        dist, _, version = folder.removesuffix(".dist-info").partition("-")
        if (leaf == "RECORD" and folder.endswith(".dist-info") and canonicalize_name(dist) == wanted
                and _version(version) == _version(package.version)):
            return True
    return False


def pip_cache_files(cache: Path) -> list[Path]:
    """The wheels pip keeps in `cache`: the wheels it built (`wheels/**/*.whl`) and the bodies
    of its HTTP cache (`http-v2/**/*.body`), at most WALK_MAX_ENTRIES files looked at."""
    found: list[Path] = []
    for sub, pattern in (("wheels", "*.whl"), ("http-v2", "*.body")):
        if (cache / sub).is_dir():
            found += itertools.islice((p for p in (cache / sub).rglob(pattern) if p.is_file()),
                                      WALK_MAX_ENTRIES)
    return found


def candidate_wheels(wheels: Iterable[Path], wheelhouse: Path | None) -> list[Path]:
    """Where the locked wheel may be: `wheels`, the `.whl` files of `wheelhouse` (default
    `./.wheelhouse` when there is one), then pip's cache."""
    folder = wheelhouse if wheelhouse is not None else Path(".wheelhouse")
    found = sorted(folder.glob("*.whl"))[:WALK_MAX_ENTRIES] if folder.is_dir() else []
    return [*wheels, *found, *pip_cache_files(pip_cache_dir())]


def pip_cache_dir() -> Path:
    """pip's cache folder, as pip finds it on Linux (`PIP_CACHE_DIR`, else the XDG cache)."""
    if explicit := os.environ.get("PIP_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pip"


def _wheel_record(wheel: Path) -> list[RecordRow]:
    """The RECORD inside `wheel` (a zip read with `zipfile`, bounded)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = archive.infolist()
            if len(members) > WHEEL_MAX_MEMBERS:
                raise InputError(f"{wheel}: more than {WHEEL_MAX_MEMBERS:,} members")
            records = [m for m in members if m.filename.count("/") == 1
                       and m.filename.endswith(".dist-info/RECORD")]
            if len(records) != 1:
                raise InputError(f"{wheel}: expected one .dist-info/RECORD, found "
                                 f"{len(records)}")
            if records[0].file_size > RECORD_MAX_BYTES:
                raise InputError(f"{wheel}: its RECORD is larger than {RECORD_MAX_BYTES:,} bytes")
            with archive.open(records[0]) as handle:
                data = handle.read(RECORD_MAX_BYTES + 1)
    except (zipfile.BadZipFile, OSError) as error:
        raise InputError(f"{wheel}: not a readable wheel ({error})") from None
    if len(data) > RECORD_MAX_BYTES:
        raise InputError(f"{wheel}: its RECORD is larger than {RECORD_MAX_BYTES:,} bytes")
    return read_record(data, f"{wheel}!RECORD")


def _metadata_version(dist_info: Path) -> str:
    """The `Version` of the distribution's METADATA (email headers, as `importlib.metadata`
    reads them)."""
    data = read_regular(dist_info / "METADATA", METADATA_MAX_BYTES)
    version = email.parser.BytesHeaderParser().parsebytes(data).get("Version")
    if not version:
        raise InputError(f"{dist_info}/METADATA: no Version")
    return str(version)


def _version(text: str) -> Version | str:
    try:
        return Version(text)
    except InvalidVersion:
        return text
