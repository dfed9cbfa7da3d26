"""The lockfile model: what exactly will be deployed, read and written deterministically.

A lockfile (YAML, `lockfile_version: 3`) pins every artifact (target, drafter, gguf) to a commit
and lists each file with its size and sha256, pins engines to a full git commit and packages to
wheel/sdist hashes. Version 3 writes each `files` list as a table in a YAML literal block, one
line per file (`SHA256 SIZE BLOB_ID|- PATH`), read without building a YAML node per field: a
100,000-file lock parses in a fraction of a second instead of 12 s (`FILES_TABLE_FORMAT`).
Version 2 adds each Hub artifact's `provenance`: `hub-confirmed` when its
files were checked against the Hub's own metadata for that commit (LFS sha256, git blob ids:
locked online, or matched with an earlier confirmed lock), `cache-unconfirmed` when they were
only read from an HF-cache snapshot (or a folder laid out like one), whose path proves nothing.
Version 1 files are still read; their Hub artifacts count as unconfirmed.

`dumps_lockfile` is deterministic (same content, same bytes) and embeds a digest of the canonical
content; `load_lockfile` validates strictly (unknown fields, bad hashes, unsafe paths and a
digest that does not match are input errors naming the file and field).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from operator import attrgetter
from pathlib import Path
from typing import NotRequired, TypedDict

import yaml
from packaging.utils import InvalidName, canonicalize_name
from packaging.version import VERSION_PATTERN

from dflash_guard import __version__
from dflash_guard.errors import InputError, shorten
from dflash_guard.fileio import read_regular, write_atomic
from dflash_guard.patterns import COMMIT_RE, REPO_RE, SHA256_RE
from dflash_guard.pins.gcpause import paused_gc
from dflash_guard.schema import MAX_DOCUMENT_CHARS, Field, Fields, read_document
from dflash_guard.urls import check_recorded_url

LOCKFILE_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
TABLE_VERSION = 3  # the first version whose `files` are a table (a block scalar)
DEPLOYED = ("target", "drafter", "gguf")  # the roles an engine of the deploy loads
# A model's upstream (`ROLE-upstream`, named by the policy's `upstream:`): only its files that
# decide what the engine reads and writes without code are locked, to compare the deployed
# role's with (`scan.upstream`); no engine loads them.
UPSTREAM = {"target-upstream": "target", "drafter-upstream": "drafter"}
UPSTREAM_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                  "added_tokens.json", "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model",
                  "spiece.model", "tekken.json", "generation_config.json",
                  "chat_template.jinja", "chat_template.json",
                  # its `chat_template` is the processor's, which vLLM 0.32 applies first
                  # (`renderers/hf.py` `resolve_chat_template`)
                  "processor_config.json")
# transformers' CHAT_TEMPLATE_DIR: each `*.jinja` directly in it is a named template (`default`
# replaces chat_template.jinja, `tool_use` serves prompts with tools): an upstream locks them too
UPSTREAM_TEMPLATE_DIR = "additional_chat_templates"
ROLES = (*DEPLOYED, *UPSTREAM)
SOURCES = ("hub", "local")
HUB_CONFIRMED = "hub-confirmed"
CACHE_UNCONFIRMED = "cache-unconfirmed"
PROVENANCES = (HUB_CONFIRMED, CACHE_UNCONFIRMED)


def is_upstream_file(rel: str) -> bool:
    """Whether an upstream locks the file `rel` (relative, POSIX): one of `UPSTREAM_FILES`, or a
    named chat template (`additional_chat_templates/NAME.jinja`)."""
    folder, _, name = rel.rpartition("/")
    return rel in UPSTREAM_FILES or (folder == UPSTREAM_TEMPLATE_DIR and name.endswith(".jinja"))


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
    provenance: str | None = None  # Hub artifacts: HUB_CONFIRMED or CACHE_UNCONFIRMED

    def __post_init__(self) -> None:
        if self.source == "hub" and self.provenance is None:  # unknown: fail closed
            object.__setattr__(self, "provenance", CACHE_UNCONFIRMED)

    @property
    def hub_confirmed(self) -> bool:
        """A Hub artifact whose files were checked against the Hub's metadata (only those get
        their organisation's trust tier; anything else is trusted as a local folder)."""
        return self.source == "hub" and self.provenance == HUB_CONFIRMED

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

    @property
    def deployed(self) -> tuple[Artifact, ...]:
        """The artifacts an engine of the deploy loads (upstreams are only compared with)."""
        return tuple(a for a in self.artifacts if a.role in DEPLOYED)

    def digest(self) -> str:
        """`sha256:<hex>` of the canonical JSON of the content (everything but the digest),
        worked out once per lock: it is immutable (a 100k-file table costs 0.1 s a time)."""
        known: str | None = self.__dict__.get("_known_digest")
        return known if known is not None else _remember_digest(self, _digest(_content(self)))


def _remember_digest(lock: Lockfile, digest: str) -> str:
    """Keep `digest` as `lock.digest()` (the instance's own: `dataclasses.replace` makes a new
    lock, which works its digest out again)."""
    object.__setattr__(lock, "_known_digest", digest)
    return digest


def _digest(content: _LockContent) -> str:
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


# --- writing ---------------------------------------------------------------------------------
# The canonical content, in the order the YAML shows it (the digest covers it sorted).


class _FileEntry(TypedDict):
    """A `files` item of versions 1 and 2."""

    path: str
    size: int
    sha256: str
    blob_id: str | None


_FilesValue = str | list[_FileEntry]  # a version 3 table, or the version 1/2 list


class _CodeRefContent(TypedDict):
    repo: str
    revision: str | None
    commit: str
    files: _FilesValue


class _Provenance(TypedDict, total=False):
    provenance: str | None  # versions 2 and 3 only


class _ArtifactContent(TypedDict):
    role: str
    source: str
    provenance: NotRequired[str | None]
    repo: str | None
    name: str | None
    revision: str | None
    commit: str | None
    files: _FilesValue
    code_refs: list[_CodeRefContent]


class _EngineContent(TypedDict):
    name: str
    url: str
    commit: str
    ref: str | None


class _PackageContent(TypedDict):
    name: str
    version: str
    sha256: list[str]


class _LockContent(TypedDict):
    lockfile_version: int
    tool_version: str
    artifacts: list[_ArtifactContent]
    engines: list[_EngineContent]
    packages: list[_PackageContent]


def _file_dict(f: LockedFile) -> _FileEntry:
    return {"path": f.path, "size": f.size, "sha256": f.sha256, "blob_id": f.blob_id}


# --- the files table (version 3) ---
FILES_TABLE_FORMAT = "SHA256 SIZE BLOB_ID|- PATH"
# A path written as it is: printable ASCII, not starting with `"` or ending in a space (a
# trailing space would make YAML quote the whole block). Anything else is a JSON string.
_PLAIN_PATH_RE = re.compile(r'[!#-~]([ -~]*[!-~])?')
_ROW = r'([0-9a-f]{64}) (0|[1-9][0-9]{0,19}) ([0-9a-f]{40}|-) ([!#-~](?:[ -~]*[!-~])?|".*)'
_ROW_RE = re.compile(_ROW)
_ROWS_RE = re.compile(f"^{_ROW}$", re.MULTILINE)  # no part of a row matches a line break
# The tables a reader has already checked to be exactly what `files_table` writes for a files
# tuple, by the tuple's id while the lock holding it is being read: the digest reuses the text.
Tables = dict[int, str]


def _path_cell(path: str) -> str:
    return path if _PLAIN_PATH_RE.fullmatch(path) else json.dumps(path)


def files_table(files: tuple[LockedFile, ...]) -> str:
    """The version 3 `files` value: one `SHA256 SIZE BLOB_ID|- PATH` line per file, by path."""
    return "".join([f"{f.sha256} {f.size} {f.blob_id or '-'} {_path_cell(f.path)}\n"
                    for f in sorted(files, key=attrgetter("path"))])


def _files_value(files: tuple[LockedFile, ...], version: int, tables: Tables) -> _FilesValue:
    if version >= TABLE_VERSION:
        return tables.get(id(files)) or files_table(files)
    return [_file_dict(f) for f in sorted(files, key=lambda f: f.path)]


def _code_ref_dict(c: CodeRef, version: int, tables: Tables) -> _CodeRefContent:
    return {
        "repo": c.repo,
        "revision": c.revision,
        "commit": c.commit,
        "files": _files_value(c.files, version, tables),
    }


def _artifact_dict(a: Artifact, version: int, tables: Tables) -> _ArtifactContent:
    provenance: _Provenance = {"provenance": a.provenance} if version >= 2 else {}
    return {
        "role": a.role,
        "source": a.source,
        **provenance,
        "repo": a.repo,
        "name": a.name,
        "revision": a.revision,
        "commit": a.commit,
        "files": _files_value(a.files, version, tables),
        "code_refs": [_code_ref_dict(c, version, tables)
                      for c in sorted(a.code_refs, key=lambda c: c.repo)],
    }


def _content(lock: Lockfile, tables: Tables | None = None) -> _LockContent:
    """Everything the digest covers, in the order the YAML shows it, lists sorted (`tables`:
    the files tables already known for some files tuples)."""
    return {
        "lockfile_version": lock.lockfile_version,
        "tool_version": lock.tool_version,
        "artifacts": [
            _artifact_dict(a, lock.lockfile_version, tables or {})
            for a in sorted(lock.artifacts, key=lambda a: ROLES.index(a.role))
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
    content = _content(lock)
    doc = {**content, "digest": _remember_digest(lock, _digest(content))}
    header = "# dflash-guard lockfile: written by `dflash-guard lock`; do not edit by hand.\n"
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter when present
    return header + yaml.serialize(_node(doc), Dumper=dumper, width=100)


def _node(value: object) -> yaml.Node:
    """The YAML node PyYAML's safe representer builds for `value` (dicts in order, block style;
    str, int, bool, None), built directly: the generic representer is most of the time of
    writing a 100k-file lockfile. `dumps_lockfile` output is byte for byte the same."""
    if isinstance(value, dict):
        return yaml.MappingNode("tag:yaml.org,2002:map",
                                [(_node(k), _node(v)) for k, v in value.items()],
                                flow_style=False)
    if isinstance(value, list):
        return yaml.SequenceNode("tag:yaml.org,2002:seq", [_node(v) for v in value],
                                 flow_style=False)
    if value is None:
        return yaml.ScalarNode("tag:yaml.org,2002:null", "null")
    if isinstance(value, bool):
        return yaml.ScalarNode("tag:yaml.org,2002:bool", "true" if value else "false")
    if isinstance(value, int):
        return yaml.ScalarNode("tag:yaml.org,2002:int", str(value))
    if isinstance(value, str):  # a files table is a literal block: one line per file in a diff
        return yaml.ScalarNode("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)
    raise TypeError(f"cannot write {type(value).__name__} in a lockfile")


def write_lockfile(lock: Lockfile, path: str | Path) -> None:
    """Write the lockfile atomically (whole or not at all)."""
    write_atomic(path, dumps_lockfile(lock))


# --- reading ---------------------------------------------------------------------------------


def is_safe_relpath(path: str) -> bool:
    """A relative POSIX path with no `..`, `.`, empty or absolute parts and no backslash."""
    if not path or "\\" in path or "\x00" in path:
        return False
    wrapped = f"/{path}/"  # an empty, `.` or `..` part (or a leading `/`) shows as one of these
    return "//" not in wrapped and "/./" not in wrapped and "/../" not in wrapped


HEX64 = "64 lowercase hex"
HEX40 = "a 40-hex commit"


def _read_files(fields: Fields, version: int, tables: Tables) -> tuple[LockedFile, ...]:
    if version >= TABLE_VERSION:
        table = fields.optional("files")
        files = () if table is None else _read_table(table)
        tables[id(files)] = table.typed(str) if table is not None else ""
        return files
    entries: list[LockedFile] = []
    seen: set[str] = set()
    for item in fields.entries("files"):
        f = item.mapping(("path", "size", "sha256", "blob_id"))
        path = f.required("path").typed(str, is_safe_relpath, "a safe relative path")
        if path in seen:
            raise item.fail(f"duplicate path {path!r}")
        seen.add(path)
        blob_id = f.optional("blob_id")
        entries.append(
            LockedFile(
                path=path,
                size=f.required("size").typed(int, lambda v: v >= 0, "a size"),
                sha256=f.required("sha256").typed(str, SHA256_RE.match, HEX64),
                blob_id=(blob_id.typed(str, COMMIT_RE.match, "40 lowercase hex")
                         if blob_id else None),
            )
        )
    return tuple(entries)


def _read_table(field: Field) -> tuple[LockedFile, ...]:
    """The files of a version 3 table. Each row is checked as strictly as a version 2 entry and
    must be written exactly as `files_table` writes it, rows sorted by path (so the text is the
    canonical table the digest covers); a bad row is an input error naming its line."""
    text = field.typed(str)
    if text and not text.endswith("\n"):
        raise field.fail("the files table must end with a line break")
    rows = _ROWS_RE.findall(text)  # one match per line, so all lines match when the counts agree
    if len(rows) == text.count("\n"):
        files, previous = [], ""
        for sha256, size, blob, cell in rows:
            path = _json_path(cell) if cell.startswith('"') else cell
            if path is None or path <= previous or not is_safe_relpath(path):
                break
            previous = path
            files.append(LockedFile(path, int(size), sha256, None if blob == "-" else blob))
        else:
            return tuple(files)
    raise _table_problem(field, text.split("\n")[:-1])


def _table_problem(field: Field, rows: list[str]) -> InputError:
    """The error naming the first bad row of a files table (the slow path of `_read_table`)."""
    block = isinstance(field.node, yaml.ScalarNode) and field.node.style == "|"
    first = field.line + 1 if block else None  # a block's rows follow its `|`
    previous = ""
    for number, row in enumerate(rows):
        match = _ROW_RE.fullmatch(row)
        cell = match.group(4) if match else ""
        path = _json_path(cell) if cell.startswith('"') else cell
        problem = (f"expected {FILES_TABLE_FORMAT!r}" if match is None
                   else "a path that is not printable ASCII is written as a JSON string"
                   if path is None
                   else "not a safe relative path" if not is_safe_relpath(path)
                   else f"duplicate path {path!r}" if path == previous
                   else "rows must be sorted by path" if path < previous else None)
        if problem is not None:
            where = (f"{field.document.source}:{first + number}: {field.where}" if first
                     else f"{field.document.source}:{field.line}: {field.where}: row {number + 1}")
            return InputError(f"{where}: {problem}: {shorten(row)}")
        previous = path or ""
    return field.fail("malformed files table")


def _json_path(cell: str) -> str | None:
    """The path a JSON-string cell names, or None unless `_path_cell` writes it so (only a path
    that cannot stand plain is quoted)."""
    try:
        path = json.loads(cell)
    except ValueError:
        return None
    return path if isinstance(path, str) and _path_cell(path) == cell else None


def _optional_str(fields: Fields, key: str) -> str | None:
    field = fields.optional(key)
    return None if field is None else field.typed(str)


def _read_provenance(f: Fields, hub: bool, version: int) -> str | None:
    """Version 2 and later: a Hub artifact's provenance (required), none for a local one;
    version 1 has none (its Hub artifacts count as unconfirmed)."""
    field = f.optional("provenance")
    if version < 2 or not hub:
        if field is not None:
            raise field.fail("only a Hub artifact of a lockfile_version 2 or 3 file has a "
                             "provenance")
        return None
    return f.required("provenance").choice(PROVENANCES)


def _read_artifact(item: Field, version: int, tables: Tables) -> Artifact:
    f = item.mapping(("role", "source", "provenance", "repo", "name", "revision", "commit",
                      "files", "code_refs"))
    role = f.required("role").typed(str, lambda v: v in ROLES, f"one of {ROLES}")
    source = f.required("source").typed(str, lambda v: v in SOURCES, f"one of {SOURCES}")
    hub = source == "hub"
    provenance = _read_provenance(f, hub, version)
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
                files=_read_files(c, version, tables),
            )
        )
    files = _read_files(f, version, tables)
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
        provenance=provenance,
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
    if version not in READABLE_VERSIONS:
        raise version_field.fail(f"unsupported version {version} (this tool reads 1, 2 and 3)")
    tables: Tables = {}
    artifacts = tuple(_read_artifact(item, version, tables) for item in f.entries("artifacts"))
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
    expected = _digest(_content(lock, tables))
    if digest != expected:
        raise digest_field.fail(f"{digest} does not match the content ({expected}); "
                                "the file was edited or damaged: re-run `dflash-guard lock`")
    _remember_digest(lock, expected)
    return lock


def _validate_lock(lock: Lockfile, source: str) -> None:
    """What a lock built in code must satisfy before it is written (reading checks the same)."""
    roles = [a.role for a in lock.artifacts]
    for role in set(roles):
        if roles.count(role) > 1:
            raise InputError(f"{source}: artifacts: role {role!r} appears more than once")
    if lock.lockfile_version >= 2:
        for a in lock.artifacts:
            if (a.provenance in PROVENANCES) != (a.source == "hub"):
                raise InputError(f"{source}: artifacts: {a.role}: provenance {a.provenance!r} "
                                 f"for a {a.source} artifact")
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
    return lockfile_from_bytes(read_lockfile_bytes(path), str(path))


def read_lockfile_bytes(path: str | Path) -> bytes:
    """A lockfile's bytes, read once (bounded) for a caller that also hashes them."""
    try:
        return read_regular(path, MAX_DOCUMENT_CHARS)
    except InputError as error:
        raise InputError(f"cannot read lockfile {error}") from None
    except OSError as error:
        raise InputError(f"cannot read lockfile {path}: {error}") from None


def lockfile_from_bytes(data: bytes, source: str) -> Lockfile:
    """The lockfile in `data` (bytes a caller read once and hashed), validated; `source` names
    it in errors."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"cannot read lockfile {source}: {error}") from None
    with paused_gc():  # a 100k-file table is 100k rows
        return parse_lockfile(text, source)
