"""The lockfile model: what exactly will be deployed, read and written deterministically.

A lockfile (YAML, `lockfile_version: 1`) pins every artifact (target, drafter, gguf) to a commit
and lists each file with its size and sha256, pins engines to a full git commit and packages to
wheel/sdist hashes. `dumps_lockfile` is deterministic (same content, same bytes) and embeds a
digest of the canonical content; `load_lockfile` validates strictly (unknown fields, bad hashes,
unsafe paths and a digest that does not match are input errors naming the file and field).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from packaging.utils import InvalidName, canonicalize_name
from packaging.version import VERSION_PATTERN

from dflash_guard import __version__
from dflash_guard.errors import InputError, shorten
from dflash_guard.fileio import read_regular, write_atomic
from dflash_guard.patterns import COMMIT_RE, REPO_RE, SHA256_RE
from dflash_guard.schema import MAX_DOCUMENT_CHARS, Field, Fields, read_document
from dflash_guard.urls import check_recorded_url

LOCKFILE_VERSION = 1
ROLES = ("target", "drafter", "gguf")
SOURCES = ("hub", "local")

# A PEP 440 version exactly (packaging's own pattern, which would also strip whitespace around it).
_VERSION_RE = re.compile(VERSION_PATTERN, re.VERBOSE | re.IGNORECASE)


def package_problem(name: str, version: str) -> str | None:
    """Why `name==version` cannot be pinned in a requirements file, or None. The name must be a
    PEP 508 project name and the version a PEP 440 version, both exactly: no extras, markers,
    URLs, options, whitespace or newlines can ride along into `requirements.txt`."""
    try:
        canonicalize_name(name, validate=True)
    except InvalidName:
        return f"{shorten(name)} is not a package name (PEP 508)"
    if not _VERSION_RE.fullmatch(version):
        return f"{shorten(version)} is not a version (PEP 440: e.g. 1.17.0)"
    return None


@dataclasses.dataclass(frozen=True)
class LockedFile:
    """One file of an artifact: its path inside the repo, size, sha256 and git blob id if known."""

    path: str
    size: int
    sha256: str
    blob_id: str | None = None


@dataclasses.dataclass(frozen=True)
class CodeRef:
    """A remote-code repo named by an `auto_map` entry (`org/repo--module.Class`), pinned."""

    repo: str
    revision: str | None
    commit: str
    files: tuple[LockedFile, ...]


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A locked model folder: a Hub repo at a commit, or a local folder known by its name."""

    role: str
    source: str
    repo: str | None
    revision: str | None
    commit: str | None
    files: tuple[LockedFile, ...]
    code_refs: tuple[CodeRef, ...] = ()
    name: str | None = None

    def file(self, path: str) -> LockedFile | None:
        """The locked file at `path`, or None."""
        return next((f for f in self.files if f.path == path), None)

    @property
    def label(self) -> str:
        """A short human name: `repo@commit12` or `local:name`."""
        if self.source == "hub":
            return f"{self.repo}@{(self.commit or '')[:12]}"
        return f"local:{self.name}"


@dataclasses.dataclass(frozen=True)
class Engine:
    """A serving engine pinned to a full git commit; `ref` (PR, tag) is informative only."""

    name: str
    url: str
    commit: str
    ref: str | None = None


@dataclasses.dataclass(frozen=True)
class Package:
    """A Python package pinned to a version and the sha256 of its wheels/sdists."""

    name: str
    version: str
    sha256: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Lockfile:
    """The whole lock. Build it, then `dumps_lockfile` it; `digest()` names its content."""

    artifacts: tuple[Artifact, ...]
    engines: tuple[Engine, ...] = ()
    packages: tuple[Package, ...] = ()
    tool_version: str = __version__
    lockfile_version: int = LOCKFILE_VERSION

    def artifact(self, role: str) -> Artifact | None:
        """The artifact locked for `role`, or None."""
        return next((a for a in self.artifacts if a.role == role), None)

    def digest(self) -> str:
        """`sha256:<hex>` of the canonical JSON of the content (everything but the digest)."""
        canonical = json.dumps(_content(self), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


# --- writing ---------------------------------------------------------------------------------


def _file_dict(f: LockedFile) -> dict[str, Any]:
    return {"path": f.path, "size": f.size, "sha256": f.sha256, "blob_id": f.blob_id}


def _code_ref_dict(c: CodeRef) -> dict[str, Any]:
    return {
        "repo": c.repo,
        "revision": c.revision,
        "commit": c.commit,
        "files": [_file_dict(f) for f in sorted(c.files, key=lambda f: f.path)],
    }


def _artifact_dict(a: Artifact) -> dict[str, Any]:
    return {
        "role": a.role,
        "source": a.source,
        "repo": a.repo,
        "name": a.name,
        "revision": a.revision,
        "commit": a.commit,
        "files": [_file_dict(f) for f in sorted(a.files, key=lambda f: f.path)],
        "code_refs": [_code_ref_dict(c) for c in sorted(a.code_refs, key=lambda c: c.repo)],
    }


def _content(lock: Lockfile) -> dict[str, Any]:
    """Everything the digest covers, in the order the YAML shows it, lists sorted."""
    return {
        "lockfile_version": lock.lockfile_version,
        "tool_version": lock.tool_version,
        "artifacts": [
            _artifact_dict(a) for a in sorted(lock.artifacts, key=lambda a: ROLES.index(a.role))
        ],
        "engines": [
            {"name": e.name, "url": e.url, "commit": e.commit, "ref": e.ref}
            for e in sorted(lock.engines, key=lambda e: e.name)
        ],
        "packages": [
            {"name": p.name, "version": p.version, "sha256": sorted(p.sha256)}
            for p in sorted(lock.packages, key=lambda p: p.name.lower())
        ],
    }


def dumps_lockfile(lock: Lockfile) -> str:
    """The lockfile as deterministic YAML: same content, same bytes."""
    _validate_lock(lock, "<lockfile>")
    doc = {**_content(lock), "digest": lock.digest()}
    header = "# dflash-guard lockfile: written by `dflash-guard lock`; do not edit by hand.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)


def write_lockfile(lock: Lockfile, path: str | Path) -> None:
    """Write the lockfile atomically (whole or not at all)."""
    write_atomic(path, dumps_lockfile(lock))


# --- reading ---------------------------------------------------------------------------------


def is_safe_relpath(path: str) -> bool:
    """A relative POSIX path with no `..`, `.`, empty or absolute parts and no backslash."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    parts = PurePosixPath(path).parts
    return all(p not in ("", ".", "..") for p in parts) and "/".join(parts) == path


HEX64 = "64 lowercase hex"
HEX40 = "a 40-hex commit"


def _read_files(fields: Fields) -> tuple[LockedFile, ...]:
    files = []
    seen: set[str] = set()
    for item in fields.entries("files"):
        f = item.mapping(("path", "size", "sha256", "blob_id"))
        path = f.required("path").typed(str, is_safe_relpath, "a safe relative path")
        if path in seen:
            raise item.fail(f"duplicate path {path!r}")
        seen.add(path)
        blob_id = f.optional("blob_id")
        files.append(
            LockedFile(
                path=path,
                size=f.required("size").typed(int, lambda v: v >= 0, "a size"),
                sha256=f.required("sha256").typed(str, SHA256_RE.match, HEX64),
                blob_id=(blob_id.typed(str, COMMIT_RE.match, "40 lowercase hex")
                         if blob_id else None),
            )
        )
    return tuple(files)


def _optional_str(fields: Fields, key: str) -> str | None:
    field = fields.optional(key)
    return None if field is None else field.typed(str)


def _read_artifact(item: Field) -> Artifact:
    f = item.mapping(("role", "source", "repo", "name", "revision", "commit", "files", "code_refs"))
    role = f.required("role").typed(str, lambda v: v in ROLES, f"one of {ROLES}")
    source = f.required("source").typed(str, lambda v: v in SOURCES, f"one of {SOURCES}")
    hub = source == "hub"
    repo = f.required("repo") if hub else f.optional("repo")
    name = f.optional("name") if hub else f.required("name")
    commit = f.required("commit") if hub else f.optional("commit")
    code_refs = []
    for raw in f.entries("code_refs"):
        c = raw.mapping(("repo", "revision", "commit", "files"))
        code_refs.append(
            CodeRef(
                repo=c.required("repo").typed(str, REPO_RE.match, "ORG/NAME"),
                revision=_optional_str(c, "revision"),
                commit=c.required("commit").typed(str, COMMIT_RE.match, HEX40),
                files=_read_files(c),
            )
        )
    files = _read_files(f)
    if not files:
        raise (f.optional("files") or item).fail("an artifact must lock at least one file")
    return Artifact(
        role=role,
        source=source,
        repo=repo.typed(str, REPO_RE.match, "ORG/NAME") if repo else None,
        revision=_optional_str(f, "revision"),
        commit=commit.typed(str, COMMIT_RE.match, HEX40) if commit else None,
        files=files,
        code_refs=tuple(code_refs),
        name=name.typed(str) if name else None,
    )


def check_url(field: Field) -> str:
    """A URL that may be recorded (no credentials, parseable): `urls.check_recorded_url`."""
    url = field.typed(str)
    try:
        return check_recorded_url(url, "url")
    except InputError as error:
        raise field.fail(str(error).removeprefix("url: ")) from None


def _read_engine(item: Field) -> Engine:
    f = item.mapping(("name", "url", "commit", "ref"))
    return Engine(
        name=f.required("name").typed(str),
        url=check_url(f.required("url")),
        commit=f.required("commit").typed(str, COMMIT_RE.match, "a full 40-hex commit"),
        ref=_optional_str(f, "ref"),
    )


def _read_package(item: Field) -> Package:
    f = item.mapping(("name", "version", "sha256"))
    hashes = f.entries("sha256")
    if not hashes:
        raise (f.optional("sha256") or item).fail("expected a non-empty list of 64-hex sha256")
    name = f.required("name").typed(str)
    version = f.required("version").typed(str)
    if problem := package_problem(name, version):
        raise item.fail(problem)
    return Package(
        name=name,
        version=version,
        sha256=tuple(h.typed(str, SHA256_RE.match, HEX64) for h in hashes),
    )


def _unique(field: Field | None, names: list[str], what: str) -> None:
    repeated = next((n for n in names if names.count(n) > 1), None)
    if field is not None and repeated is not None:
        raise field.fail(f"{what} {repeated!r} appears more than once")


def parse_lockfile(text: str, source: str = "<lockfile>") -> Lockfile:
    """Parse and validate lockfile text; raise `InputError` naming `source`, line and field."""
    top = read_document(text, source)
    if top is None:
        raise InputError(f"{source}: the lockfile is empty")
    f = top.mapping(
        ("lockfile_version", "tool_version", "artifacts", "engines", "packages", "digest")
    )
    version_field = f.required("lockfile_version")
    version = version_field.typed(int)
    if version != LOCKFILE_VERSION:
        raise version_field.fail(f"unsupported version {version} (this tool reads 1)")
    artifacts = tuple(_read_artifact(item) for item in f.entries("artifacts"))
    _unique(f.optional("artifacts"), [a.role for a in artifacts], "role")
    engines = tuple(_read_engine(item) for item in f.entries("engines"))
    _unique(f.optional("engines"), [e.name for e in engines], "engine name")
    packages = tuple(_read_package(item) for item in f.entries("packages"))
    _unique(f.optional("packages"), [canonicalize_name(p.name) for p in packages], "package")
    lock = Lockfile(
        artifacts=artifacts,
        engines=engines,
        packages=packages,
        tool_version=f.required("tool_version").typed(str),
        lockfile_version=version,
    )
    digest_field = f.required("digest")
    digest = digest_field.typed(str)
    if digest != lock.digest():
        raise digest_field.fail(f"{digest} does not match the content ({lock.digest()}); "
                                "the file was edited or damaged: re-run `dflash-guard lock`")
    return lock


def _validate_lock(lock: Lockfile, source: str) -> None:
    """What a lock built in code must satisfy before it is written (reading checks the same)."""
    roles = [a.role for a in lock.artifacts]
    for role in set(roles):
        if roles.count(role) > 1:
            raise InputError(f"{source}: artifacts: role {role!r} appears more than once")
    names = [e.name for e in lock.engines]
    if len(set(names)) != len(names):
        raise InputError(f"{source}: engines: an engine name appears more than once")
    for package in lock.packages:
        if problem := package_problem(package.name, package.version):
            raise InputError(f"{source}: packages: {problem}")
    packages = [canonicalize_name(p.name) for p in lock.packages]
    if len(set(packages)) != len(packages):
        raise InputError(f"{source}: packages: a package appears more than once")


def load_lockfile(path: str | Path) -> Lockfile:
    """Read and validate a lockfile; raise `InputError` naming the file and the bad field."""
    try:
        text = read_regular(path, MAX_DOCUMENT_CHARS).decode("utf-8")
    except InputError as error:
        raise InputError(f"cannot read lockfile {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read lockfile {path}: {error}") from None
    return parse_lockfile(text, str(path))
