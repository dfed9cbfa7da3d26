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
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from dflash_guard import __version__
from dflash_guard.errors import InputError
from dflash_guard.fileio import write_atomic
from dflash_guard.patterns import COMMIT_RE, REPO_RE, SHA256_RE

LOCKFILE_VERSION = 1
ROLES = ("target", "drafter", "gguf")
SOURCES = ("hub", "local")

PACKAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")


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


class _Reader:
    """Strict field access that names the file and the field in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> InputError:
        return InputError(f"{self.source}: {where}: {message}")

    def mapping(self, value: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        for key in value:
            if key not in allowed:
                raise self.fail(where, f"unknown field {key!r}")
        return value

    def field(
        self,
        obj: dict[str, Any],
        key: str,
        where: str,
        kind: type,
        *,
        required: bool = True,
        check: Callable[[Any], bool] | None = None,
        expect: str = "",
    ) -> Any:
        here = f"{where}.{key}" if where else key
        if key not in obj or obj[key] is None:
            if required:
                raise self.fail(here, "missing required field")
            return None
        value = obj[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(here, f"expected {expect or kind.__name__}, got {value!r}")
        if check is not None and not check(value):
            raise self.fail(here, f"expected {expect}, got {value!r}")
        return value

    def items(self, obj: dict[str, Any], key: str, where: str) -> list[Any]:
        value = obj.get(key, [])
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(f"{where}.{key}" if where else key, "expected a list")
        return value


def is_safe_relpath(path: str) -> bool:
    """A relative POSIX path with no `..`, `.`, empty or absolute parts and no backslash."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    parts = PurePosixPath(path).parts
    return all(p not in ("", ".", "..") for p in parts) and "/".join(parts) == path


def _read_files(r: _Reader, raw: dict[str, Any], where: str) -> tuple[LockedFile, ...]:
    files = []
    seen: set[str] = set()
    for i, item in enumerate(r.items(raw, "files", where)):
        here = f"{where}.files[{i}]"
        obj = r.mapping(item, here, ("path", "size", "sha256", "blob_id"))
        path = r.field(obj, "path", here, str, check=is_safe_relpath, expect="a safe relative path")
        if path in seen:
            raise r.fail(here, f"duplicate path {path!r}")
        seen.add(path)
        files.append(
            LockedFile(
                path=path,
                size=r.field(obj, "size", here, int, check=lambda v: v >= 0, expect="a size"),
                sha256=r.field(
                    obj, "sha256", here, str, check=SHA256_RE.match, expect="64 lowercase hex"
                ),
                blob_id=r.field(
                    obj, "blob_id", here, str, required=False, check=COMMIT_RE.match,
                    expect="40 lowercase hex",
                ),
            )
        )
    return tuple(files)


def _read_artifact(r: _Reader, item: Any, where: str) -> Artifact:
    allowed = ("role", "source", "repo", "name", "revision", "commit", "files", "code_refs")
    obj = r.mapping(item, where, allowed)
    role = r.field(obj, "role", where, str, check=lambda v: v in ROLES, expect=f"one of {ROLES}")
    source = r.field(
        obj, "source", where, str, check=lambda v: v in SOURCES, expect=f"one of {SOURCES}"
    )
    hub = source == "hub"
    repo = r.field(obj, "repo", where, str, required=hub, check=REPO_RE.match, expect="ORG/NAME")
    name = r.field(obj, "name", where, str, required=not hub)
    commit = r.field(obj, "commit", where, str, required=hub, check=COMMIT_RE.match,
                     expect="a 40-hex commit")
    code_refs = []
    for i, raw in enumerate(r.items(obj, "code_refs", where)):
        here = f"{where}.code_refs[{i}]"
        cobj = r.mapping(raw, here, ("repo", "revision", "commit", "files"))
        code_refs.append(
            CodeRef(
                repo=r.field(cobj, "repo", here, str, check=REPO_RE.match, expect="ORG/NAME"),
                revision=r.field(cobj, "revision", here, str, required=False),
                commit=r.field(cobj, "commit", here, str, check=COMMIT_RE.match,
                               expect="a 40-hex commit"),
                files=_read_files(r, cobj, here),
            )
        )
    files = _read_files(r, obj, where)
    if not files:
        raise r.fail(f"{where}.files", "an artifact must lock at least one file")
    return Artifact(
        role=role,
        source=source,
        repo=repo,
        revision=r.field(obj, "revision", where, str, required=False),
        commit=commit,
        files=files,
        code_refs=tuple(code_refs),
        name=name,
    )


def parse_lockfile(text: str, source: str = "<lockfile>") -> Lockfile:
    """Parse and validate lockfile text; raise `InputError` naming `source` and the field."""
    r = _Reader(source)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InputError(f"{source}: not valid YAML: {str(error).splitlines()[0]}") from None
    allowed = ("lockfile_version", "tool_version", "artifacts", "engines", "packages", "digest")
    doc = r.mapping(doc, "top level", allowed)
    version = r.field(doc, "lockfile_version", "", int)
    if version != LOCKFILE_VERSION:
        raise r.fail("lockfile_version", f"unsupported version {version} (this tool reads 1)")
    artifacts = tuple(
        _read_artifact(r, item, f"artifacts[{i}]")
        for i, item in enumerate(r.items(doc, "artifacts", ""))
    )
    engines = []
    for i, item in enumerate(r.items(doc, "engines", "")):
        here = f"engines[{i}]"
        obj = r.mapping(item, here, ("name", "url", "commit", "ref"))
        engines.append(
            Engine(
                name=r.field(obj, "name", here, str),
                url=r.field(obj, "url", here, str),
                commit=r.field(obj, "commit", here, str, check=COMMIT_RE.match,
                               expect="a full 40-hex commit"),
                ref=r.field(obj, "ref", here, str, required=False),
            )
        )
    packages = []
    for i, item in enumerate(r.items(doc, "packages", "")):
        here = f"packages[{i}]"
        obj = r.mapping(item, here, ("name", "version", "sha256"))
        hashes = r.items(obj, "sha256", here)
        if not hashes or not all(isinstance(h, str) and SHA256_RE.match(h) for h in hashes):
            raise r.fail(f"{here}.sha256", "expected a non-empty list of 64-hex sha256")
        packages.append(
            Package(
                name=r.field(obj, "name", here, str, check=PACKAGE_RE.match, expect="a name"),
                version=r.field(obj, "version", here, str),
                sha256=tuple(hashes),
            )
        )
    lock = Lockfile(
        artifacts=artifacts,
        engines=tuple(engines),
        packages=tuple(packages),
        tool_version=r.field(doc, "tool_version", "", str),
        lockfile_version=version,
    )
    _validate_lock(lock, source)
    digest = r.field(doc, "digest", "", str)
    if digest != lock.digest():
        raise r.fail("digest", f"{digest} does not match the content ({lock.digest()}); "
                     "the file was edited or damaged: re-run `dflash-guard lock`")
    return lock


def _validate_lock(lock: Lockfile, source: str) -> None:
    roles = [a.role for a in lock.artifacts]
    for role in set(roles):
        if roles.count(role) > 1:
            raise InputError(f"{source}: artifacts: role {role!r} appears more than once")
    names = [e.name for e in lock.engines]
    if len(set(names)) != len(names):
        raise InputError(f"{source}: engines: an engine name appears more than once")


def load_lockfile(path: str | Path) -> Lockfile:
    """Read and validate a lockfile; raise `InputError` naming the file and the bad field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read lockfile {path}: {error}") from None
    return parse_lockfile(text, str(path))
