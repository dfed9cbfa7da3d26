"""Build a lockfile from sources: Hub repos, HF-cache snapshots, local folders, engines, packages.

`build_lock` is what `dflash-guard lock` runs. A Hub source is resolved once to a commit through
`huggingface_hub`; files without an LFS sha256 are fetched (into a temporary cache, never the
user's) at that commit, checked against their git blob id and hashed: its provenance is
`hub-confirmed`. An HF-cache snapshot (given as a path, or found offline) is only a folder whose
path names a repo and commit: anyone can lay one out. It is locked `cache-unconfirmed` (the
policy then trusts it as a local folder) unless an earlier confirmed lock (`confirmed_by`) lists
the same repo at the same commit with exactly these files; one that disagrees is refused.
`auto_map` entries naming another repo are pinned too, or the lock is refused: `build_lock`
returns a refused `Outcome` (the CLI exits 1), an unusable input is an `InputError` (exit 2).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from dflash_guard.errors import HubError, InputError, shorten
from dflash_guard.fileio import MAX_JSON_BYTES, open_binary, read_input_json
from dflash_guard.outcome import Outcome
from dflash_guard.patterns import COMMIT_RE, REPO_RE, SHA256_RE
from dflash_guard.pins import hub
from dflash_guard.pins.folder import absolute_root, list_folder
from dflash_guard.pins.gcpause import paused_gc
from dflash_guard.pins.hashing import StatCache, digest_files, git_blob_id, sha256_file
from dflash_guard.pins.lockfile import (
    CACHE_UNCONFIRMED,
    HUB_CONFIRMED,
    UPSTREAM,
    UPSTREAM_FILES,
    UPSTREAM_TEMPLATE_DIR,
    Artifact,
    CodeRef,
    Engine,
    LockedFile,
    Lockfile,
    Package,
    is_safe_relpath,
    is_upstream_file,
    package_problem,
)
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.urls import check_recorded_url

AUTO_MAP_FILES = ("config.json", "tokenizer_config.json")
ENGINE_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9][\w.\-]*)=(?P<url>\S+)@(?P<sha>[^@#\s]*)(?:#(?P<ref>\S+))?$"
)
WHEEL_RE = re.compile(r"^(?P<name>[A-Za-z0-9][\w.]*)-(?P<version>[^-]+)(?:-[^-]+){3}\.whl$")


@dataclasses.dataclass(frozen=True)
class LockResult:
    """What `build_lock` concluded: the lock when it passed, else the refusal and its reason."""

    outcome: Outcome
    lock: Lockfile | None = None
    warnings: tuple[str, ...] = ()  # for stderr: what the lock could not check


@dataclasses.dataclass(frozen=True)
class LockReport:
    """`lock`'s report: the outcome and, when it passed, the lockfile written to `output`."""

    outcome: Outcome
    output: Path
    lock: Lockfile | None = None

    @property
    def passed(self) -> bool:
        return self.lock is not None

    def to_json(self) -> dict[str, object]:
        lock = self.lock
        return {
            "passed": self.passed,
            "reason": None if self.passed else self.outcome.reason,
            "lockfile": str(self.output) if lock is not None else None,
            "digest": lock.digest() if lock is not None else None,
            "artifacts": {a.role: a.label for a in lock.artifacts} if lock is not None else {},
            "provenance": ({a.role: a.provenance for a in lock.artifacts}
                           if lock is not None else {}),
        }


class _Refused(Exception):
    """Raised where a source turns out unsafe to lock; `build_lock` turns it into an outcome."""


# --- artifacts -----------------------------------------------------------------------------------


def lock_source(role: str, src: str, confirmed_by: Lockfile | None = None,
                progress: Progress = NO_PROGRESS, cache: StatCache | None = None) -> Artifact:
    """Lock one SRC: a local folder, an HF-cache snapshot, or `ORG/NAME[@REV]` on the Hub.

    `confirmed_by`: an earlier lock whose `hub-confirmed` artifacts can confirm a snapshot; a
    folder's hashing is a stage of `progress` (`hashing ROLE`), answered and recorded by the
    stat `cache` when one is given (its caller saves it)."""
    flag = f"--upstream {UPSTREAM[role]}=" if role in UPSTREAM else f"--{role} "
    path = Path(src).expanduser()
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{flag}{src}: not a folder")
        if (identity := hub.snapshot_identity(path)) is not None:
            repo, commit = identity
            return _lock_folder(role, path, repo=repo, commit=commit, revision=commit,
                                confirmed_by=confirmed_by, progress=progress, cache=cache)
        return _lock_folder(role, path, progress=progress, cache=cache)
    if src.startswith((".", "/", "~")):
        raise InputError(f"{flag}{src}: no such folder")
    parsed = hub.parse_hub_source(src)
    if parsed is None:
        raise InputError(f"{flag}{src}: neither an existing folder nor ORG/NAME[@REV]")
    repo, revision = parsed
    if hub.is_offline():
        cached = hub.cached_commit(repo, revision)
        snapshot = hub.cached_snapshot(repo, cached) if cached else None
        if snapshot is None:
            raise HubError(
                f"hub: {repo}@{revision or 'main'}: HF_HUB_OFFLINE is set and the HF cache "
                f"({hub.hub_cache_dir()}) has no snapshot for it"
            )
        return _lock_folder(role, snapshot, repo=repo, commit=cached, revision=revision,
                            confirmed_by=confirmed_by, progress=progress, cache=cache)
    return _lock_hub(role, repo, revision)


def _lock_folder(
    role: str,
    folder: Path,
    *,
    repo: str | None = None,
    commit: str | None = None,
    revision: str | None = None,
    confirmed_by: Lockfile | None = None,
    progress: Progress = NO_PROGRESS,
    cache: StatCache | None = None,
) -> Artifact:
    """Hash every file of a folder (or a cached snapshot) into an artifact."""
    in_cache = repo is not None
    boundary = hub.snapshot_boundary(folder) if in_cache else None
    files, unsafe = list_folder(absolute_root(folder), boundary)
    if role in UPSTREAM:
        files = {rel: path for rel, path in files.items() if is_upstream_file(rel)}
        unsafe = [u for u in unsafe if is_upstream_file(u.path)]
    if unsafe:
        first = unsafe[0]
        raise _Refused(f"{folder}: refusing to lock: {first.path}: {first.detail}")
    if not files:
        raise InputError(f"{folder}: the folder has no files to lock"
                         + (f" (an upstream locks only {', '.join(UPSTREAM_FILES)} and "
                            f"{UPSTREAM_TEMPLATE_DIR}/*.jinja)"
                            if role in UPSTREAM else ""))
    digests = digest_files(files.values(), cache=cache, progress=progress,
                           stage_name=f"hashing {role}")
    rows = []
    for rel, path in sorted(files.items()):
        sha256, size = digests[path]  # the size is the bytes hashed: no second stat
        rows.append(LockedFile(rel, size, sha256,
                               hub.cached_blob_id(Path(path)) if in_cache else None))
    locked = tuple(rows)
    code_refs = () if role in UPSTREAM else _lock_code_refs(
        role, {rel: Path(files[rel]) for rel in AUTO_MAP_FILES if rel in files})
    if in_cache:
        assert repo is not None and commit is not None
        provenance = _snapshot_provenance(role, repo, commit, locked, confirmed_by)
        return Artifact(role, "hub", repo, revision, commit, locked, code_refs,
                        provenance=provenance)
    return Artifact(role, "local", None, None, None, locked, code_refs, name=folder.resolve().name)


def _lock_hub(role: str, repo: str, revision: str | None) -> Artifact:
    """Resolve a Hub repo at `revision` and lock every file at the commit it names (an
    upstream's `UPSTREAM_FILES` only)."""
    state = hub.resolve_repo(repo, revision)
    if role in UPSTREAM:
        state = dataclasses.replace(state, files=tuple(f for f in state.files
                                                       if is_upstream_file(f.path)))
        if not state.files:
            raise InputError(f"--upstream {UPSTREAM[role]}={repo}: the repo has none of "
                             f"{', '.join(UPSTREAM_FILES)} at {state.commit[:12]}")
    for f in state.files:
        if not is_safe_relpath(f.path):
            raise _Refused(f"hub: {repo}@{state.commit}: unsafe file path {f.path!r}")
    with hub.staging_cache() as staging:
        fetched = {
            f.path: _fetch_checked(repo, state.commit, f, staging)
            for f in state.files
            if f.lfs_sha256 is None
        }
        locked = tuple(
            fetched[f.path][1] if f.lfs_sha256 is None
            else LockedFile(path=f.path, size=f.size, sha256=f.lfs_sha256, blob_id=f.blob_id)
            for f in sorted(state.files, key=lambda f: f.path)
        )
        code_refs = () if role in UPSTREAM else _lock_code_refs(
            role, {p: fetched[p][0] for p in AUTO_MAP_FILES if p in fetched})
    return Artifact(role, "hub", repo, revision, state.commit, locked, code_refs,
                    provenance=HUB_CONFIRMED)


def _snapshot_provenance(role: str, repo: str, commit: str, locked: tuple[LockedFile, ...],
                         confirmed_by: Lockfile | None) -> str:
    """`hub-confirmed` when `confirmed_by` (a lock whose signature the caller verified) has a
    confirmed artifact of `repo` at `commit` listing exactly the locked files (the same paths,
    none missing and none extra, each with the same size and sha256); a confirmed lock that
    disagrees is a refusal (the snapshot is not what the Hub served); else `cache-unconfirmed`."""
    known = next((a for a in (confirmed_by.artifacts if confirmed_by else ())
                  if a.hub_confirmed and a.repo == repo and a.commit == commit), None)
    if known is None:
        return CACHE_UNCONFIRMED
    expected = {f.path: (f.size, f.sha256) for f in known.files}
    differ = [f.path for f in locked if expected.get(f.path) != (f.size, f.sha256)]
    differ += sorted(set(expected) - {f.path for f in locked})  # missing from the snapshot
    if differ:
        raise _Refused(f"--{role}: {repo}@{commit[:12]}: {', '.join(differ[:3])} differ from "
                       "the confirmed lock given with --confirmed-by (the snapshot is not what "
                       "the Hub served)")
    return HUB_CONFIRMED


def _fetch_checked(
    repo: str, commit: str, f: hub.HubFile, staging: Path
) -> tuple[Path, LockedFile]:
    """Download a non-LFS file, check it is the blob the Hub listed (size and git blob id), and
    lock it from the bytes already read: (downloaded path, locked file)."""
    path = hub.download(repo, commit, f.path, staging)
    with open_binary(path) as handle:
        data = handle.read(f.size + 1)  # a longer file is a mismatch: read no further
    if len(data) != f.size or (f.blob_id and git_blob_id(data) != f.blob_id):
        raise HubError(
            f"hub: {repo}@{commit}: {f.path}: downloaded content does not match the listed "
            f"size/blob id (truncated or altered in transit)"
        )
    return path, LockedFile(f.path, len(data), hashlib.sha256(data).hexdigest(), f.blob_id)


# --- remote code named by auto_map ---------------------------------------------------------------


def auto_map_refs(config_files: dict[str, Path]) -> dict[str, set[str]]:
    """Remote repos named by `auto_map` entries (`org/repo--module.Class`) -> module files."""
    refs: dict[str, set[str]] = {}
    for rel, path in config_files.items():
        config = read_input_json(path, rel, MAX_JSON_BYTES)
        auto_map = config.get("auto_map") if isinstance(config, dict) else None
        if not isinstance(auto_map, dict):
            continue
        for value in auto_map.values():
            for entry in value if isinstance(value, list) else [value]:
                if not isinstance(entry, str) or "--" not in entry:
                    continue
                repo, reference = entry.split("--", 1)
                module = reference.rsplit(".", 1)[0]
                refs.setdefault(repo, set()).add(module.replace(".", "/") + ".py")
    return refs


def _lock_code_refs(role: str, config_files: dict[str, Path]) -> tuple[CodeRef, ...]:
    refs = []
    for repo, modules in sorted(auto_map_refs(config_files).items()):
        if not REPO_RE.match(repo):
            raise _Refused(f"--{role}: auto_map names {repo!r}, which is not an ORG/NAME repo")
        refs.append(_lock_code_ref(role, repo, sorted(modules)))
    return tuple(refs)


def _lock_code_ref(role: str, repo: str, modules: list[str]) -> CodeRef:
    """Pin the module files of a remote-code repo at its default branch's current commit."""
    if hub.is_offline():
        commit = hub.cached_commit(repo, None)
        snapshot = hub.cached_snapshot(repo, commit) if commit else None
        missing = [m for m in modules if snapshot is None or not (snapshot / m).is_file()]
        if commit is None or snapshot is None or missing:  # no commit: no snapshot either
            raise _Refused(
                f"--{role}: auto_map points at remote code in {repo} ({', '.join(modules)}), "
                "which cannot be pinned: HF_HUB_OFFLINE is set and it is not in the HF cache"
            )
        files = tuple(_local_locked(snapshot / m, m) for m in modules)
        return CodeRef(repo, None, commit, files)
    try:
        state = hub.resolve_repo(repo, None)
    except HubError as error:
        raise _Refused(
            f"--{role}: auto_map points at remote code in {repo} that cannot be pinned: {error}"
        ) from None
    listed = {f.path: f for f in state.files}
    missing = [m for m in modules if m not in listed]
    if missing:
        raise _Refused(
            f"--{role}: auto_map points at {repo}, which has no {', '.join(missing)} "
            f"at {state.commit}"
        )
    with hub.staging_cache() as staging:
        files = tuple(_fetch_checked(repo, state.commit, listed[m], staging)[1] for m in modules)
    return CodeRef(repo, None, state.commit, files)


def _local_locked(path: Path, rel: str) -> LockedFile:
    return LockedFile(rel, path.stat().st_size, sha256_file(path))


# --- engines and packages ------------------------------------------------------------------------


def parse_engine(spec: str) -> Engine:
    """`NAME=GIT_URL@SHA[#REF]`; the SHA must be the full 40-hex commit."""
    match = ENGINE_RE.fullmatch(spec)
    if not match:  # the spec is not quoted back: it may carry a credential
        name = shorten(spec.partition("=")[0])
        raise InputError(f"--engine {name}=...: expected NAME=GIT_URL@SHA[#REF]")
    name, sha = match["name"], match["sha"]
    url = check_recorded_url(match["url"], f"--engine {name}")
    if not COMMIT_RE.match(sha):
        raise InputError(
            f"--engine {name}: {shorten(sha)} is not a full 40-hex lowercase commit SHA; a "
            "branch, tag, PR number or short SHA can move: record it after '#', beside the full SHA"
        )
    return Engine(name=name, url=url, commit=sha, ref=match["ref"])


def parse_package(spec: str) -> Package:
    """`NAME==VERSION@SRC[,SRC...]` (SRC: `sha256:HEX` or a local wheel/sdist), or a wheel path."""
    path = Path(spec).expanduser()
    if path.is_file() and (wheel := WHEEL_RE.match(path.name)):
        if problem := package_problem(wheel["name"], wheel["version"]):
            raise InputError(f"--package {shorten(path.name)}: {problem}")
        return Package(wheel["name"], wheel["version"], (sha256_file(path),))
    head, _, sources = spec.partition("@")
    name, sep, version = head.partition("==")
    if not sep:
        raise InputError(f"--package {shorten(spec)}: expected "
                         "NAME==VERSION@sha256:HEX|FILE[,...]")
    if problem := package_problem(name, version):
        raise InputError(f"--package {shorten(spec)}: {problem}; expected "
                         "NAME==VERSION@sha256:HEX|FILE[,...]")
    if not sources:
        raise InputError(
            f"--package {spec!r}: no hash given; add @sha256:HEX or @path/to/the.whl "
            "(pip --require-hashes needs every wheel/sdist hash)"
        )
    hashes = []
    for item in sources.split(","):
        if item.startswith("sha256:") and SHA256_RE.match(item[7:]):
            hashes.append(item[7:])
        elif Path(item).expanduser().is_file():
            hashes.append(sha256_file(Path(item).expanduser()))
        else:
            raise InputError(f"--package {spec!r}: {item!r} is neither sha256:<64 hex> nor a file")
    return Package(name, version, tuple(sorted(set(hashes))))


def package_wheel(spec: str) -> Path | None:
    """The wheel file a `--package` spec gives (the path itself, or a `.whl` among its
    sources), whose METADATA says what it needs; None for hashes alone or an sdist."""
    path = Path(spec).expanduser()
    if path.is_file() and WHEEL_RE.match(path.name):
        return path
    _, _, sources = spec.partition("@")
    wheels = [Path(item).expanduser() for item in sources.split(",") if item.endswith(".whl")]
    return next((w for w in wheels if w.is_file()), None)


def _closed_packages(specs: Iterable[str]) -> tuple[tuple[Package, ...], str | None, str]:
    """The packages of `specs` closed under their wheels' dependencies (pins/closure.py), the
    refusal when some need is met by nothing, and a warning naming those whose needs are
    unchecked."""
    from packaging.utils import canonicalize_name

    from dflash_guard.pins.closure import close

    specs = list(specs)
    parsed = [parse_package(spec) for spec in specs]
    wheels = {str(canonicalize_name(package.name)): wheel
              for spec, package in zip(specs, parsed, strict=True)
              if (wheel := package_wheel(spec)) is not None}
    closure = close(parsed, wheels)
    refusal = None
    if closure.missing:
        refusal = ("the packages are not closed under their dependencies (pip --require-hashes "
                   "would refuse the export): " + "; ".join(closure.missing) + ". Add "
                   "--package for each, or put its wheel beside the wheels given")
    note = ""
    if closure.unchecked:
        note = (f"--package: dependencies not checked for {', '.join(closure.unchecked)} (given "
                "by hash only; pip --require-hashes refuses the export unless every dependency "
                "is locked too: pass the wheel files to have them checked)")
    return closure.packages, refusal, note


def build_lock(
    sources: dict[str, str],
    engines: Iterable[str] = (),
    packages: Iterable[str] = (),
    confirmed_by: Lockfile | None = None,
    progress: Progress = NO_PROGRESS,
) -> LockResult:
    """Resolve every source (`{role: SRC}`), engine and package spec into a `Lockfile`, or
    refuse (a source that cannot be locked safely); bad input raises `InputError`.
    `confirmed_by` (an earlier lock) can confirm HF-cache snapshots' Hub provenance; hashing
    reports to `progress`."""
    parsed_engines = tuple(parse_engine(e) for e in engines)
    parsed_packages, refusal, note = _closed_packages(packages)
    if refusal is not None:
        return LockResult(Outcome.refused(refusal))
    try:
        with paused_gc():
            cache = StatCache()  # one for every folder, read and written once
            try:
                artifacts = tuple(lock_source(role, src, confirmed_by, progress, cache)
                                  for role, src in sources.items())
            finally:
                cache.save()  # a verify right after the lock is then a stat per file
    except _Refused as refusal:
        return LockResult(Outcome.refused(str(refusal)))
    lock = Lockfile(artifacts=artifacts, engines=parsed_engines, packages=parsed_packages)
    return LockResult(Outcome.passed(f"{len(artifacts)} artifacts locked"), lock,
                      (note,) if note else ())


def requirements_text(lock: Lockfile) -> str:
    """A pip `--require-hashes` requirements file for the locked packages."""
    from dflash_guard.pins.engine_pins import APP_IMAGES

    packages = [p for p in lock.packages if p.name.lower() not in APP_IMAGES]  # no wheels
    if not packages:
        raise InputError("the lockfile pins no packages: nothing to export")
    lines = ["# generated by `dflash-guard export requirements`; install with pip --require-hashes"]
    for p in sorted(packages, key=lambda p: p.name.lower()):
        hashes = " \\\n    ".join(f"--hash=sha256:{h}" for h in sorted(p.sha256))
        lines.append(f"{p.name}=={p.version} \\\n    {hashes}")
    return "\n".join(lines) + "\n"
