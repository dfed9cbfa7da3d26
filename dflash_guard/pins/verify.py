"""Byte-exact verification of what is on disk against a lockfile.

For each locked artifact the folder is found (the `roots` given for its role, else the HF-cache
snapshot at its pinned commit, else with `download=True` a fresh download that is checked before
it is kept), every regular file is listed, and each is compared with the lock: missing, extra,
size, sha256, unsafe symlink or path. Hashing runs in parallel with a stat cache.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.pins import hub
from dflash_guard.pins.folder import absolute_root, list_folder
from dflash_guard.pins.gcpause import paused_gc
from dflash_guard.pins.hashing import StatCache, hash_files, stat_key
from dflash_guard.pins.lockfile import (
    UPSTREAM,
    Artifact,
    CodeRef,
    LockedFile,
    Lockfile,
    is_safe_relpath,
    is_upstream_file,
)
from dflash_guard.progress import NO_PROGRESS, Progress


@dataclasses.dataclass(frozen=True)
class FileProblem:
    """One file that differs from the lock, and how."""

    role: str
    path: str
    kind: str
    expected: str | None
    actual: str | None

    def describe(self) -> str:
        """`ROLE/PATH: what is wrong`, as the gate and `verify-approval` say it."""
        what = {"size": "size differs from the lock", "sha256": "sha256 differs from the lock",
                "missing": "missing", "extra": "not in the lock",
                "symlink": f"unsafe symlink ({self.actual})",
                "path": f"unsafe path ({self.actual})"}.get(self.kind, self.kind)
        return f"{self.role}/{self.path}: {what}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class VerifyReport:
    """The verdict: `passed` when every locked file matched and nothing extra was found."""

    problems: list[FileProblem]
    locations: dict[str, Path]
    files_checked: int = 0
    bytes_hashed: int = 0
    cache_hits: int = 0
    # `ROLE/PATH` -> the sha256 found on disk (hashed in this run unless the cache answered).
    digests: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "locations": {role: str(path) for role, path in sorted(self.locations.items())},
            "files_checked": self.files_checked,
            "bytes_hashed": self.bytes_hashed,
            "cache_hits": self.cache_hits,
            "problems": [p.to_json() for p in self.problems],
        }


@dataclasses.dataclass(frozen=True)
class _Target:
    """One folder to compare with a list of locked files."""

    role: str  # "drafter", or "drafter:code:org/repo" for a pinned auto_map repo
    folder: Path
    boundary: Path | None
    files: tuple[LockedFile, ...]


def locked_files(lock: Lockfile) -> dict[str, str]:
    """Every file `verify_lock` compares, as `ROLE/PATH` -> the locked sha256: each artifact's
    files, and each pinned remote-code repo's as `ROLE:code:REPO/PATH`. The one listing of what
    a lock covers: the approval record's subjects and `verify-approval` use it too."""
    named = {}
    for artifact in lock.artifacts:
        named.update({f"{artifact.role}/{f.path}": f.sha256 for f in artifact.files})
        for ref in artifact.code_refs:
            named.update({f"{artifact.role}:code:{ref.repo}/{f.path}": f.sha256
                          for f in ref.files})
    return named


def verify_lock(
    lock: Lockfile,
    roots: dict[str, Path] | None = None,
    *,
    download: bool = False,
    use_cache: bool = True,
    progress: Progress = NO_PROGRESS,
) -> VerifyReport:
    """Verify every artifact of `lock` on disk; raise `InputError` when a folder cannot be found.

    Each folder's hashing is a stage of `progress` (`hashing ROLE`: bytes and files)."""
    roots = dict(roots or {})
    unknown = sorted(set(roots) - {a.role for a in lock.artifacts})
    if unknown:
        raise InputError(f"--root {unknown[0]}=...: the lockfile has no artifact with that role")
    report = VerifyReport(problems=[], locations={})
    with paused_gc():
        cache = StatCache() if use_cache else None
        for artifact in lock.artifacts:
            target = _locate(artifact, roots.get(artifact.role), download, report)
            if target is None:
                continue
            report.locations[artifact.role] = target.folder
            _compare(target, cache, progress, report)
            for ref in artifact.code_refs:
                code = _locate_code_ref(artifact.role, ref, download, report)
                if code is not None:
                    _compare(code, cache, progress, report)
        if cache is not None:
            cache.save()
    return report


def _locate(
    artifact: Artifact, root: Path | None, download: bool, report: VerifyReport
) -> _Target | None:
    """The folder to compare for `artifact`; None when a download failed its check."""
    if root is not None:
        if not root.is_dir():
            raise InputError(f"--root {artifact.role}={root}: no such folder")
        # an HF-cache snapshot given as a folder: its files link into the repo's blobs/
        boundary = hub.snapshot_boundary(root) if hub.snapshot_identity(root) else None
        return _Target(artifact.role, root, boundary, artifact.files)
    if artifact.source == "local":
        raise InputError(
            f"artifact {artifact.role!r} was locked from a local folder ({artifact.name!r}); "
            f"pass --root {artifact.role}=DIR"
        )
    assert artifact.repo is not None and artifact.commit is not None
    snapshot = hub.cached_snapshot(artifact.repo, artifact.commit)
    if snapshot is None and download:
        snapshot = _download_checked(
            artifact.role, artifact.repo, artifact.commit, artifact.files, report
        )
        if snapshot is None:
            return None
    if snapshot is None:
        raise InputError(
            f"artifact {artifact.role!r} ({artifact.label}) is not in the HF cache "
            f"({hub.hub_cache_dir()}); pass --root {artifact.role}=DIR or --download"
        )
    return _Target(artifact.role, snapshot, hub.snapshot_boundary(snapshot), artifact.files)


def _locate_code_ref(
    role: str, ref: CodeRef, download: bool, report: VerifyReport
) -> _Target | None:
    """The cached snapshot of a pinned remote-code repo; its absence is a `missing` problem."""
    label = f"{role}:code:{ref.repo}"
    snapshot = hub.cached_snapshot(ref.repo, ref.commit)
    if snapshot is None and download:
        snapshot = _download_checked(label, ref.repo, ref.commit, ref.files, report)
        if snapshot is None:
            return None
    if snapshot is None:
        report.problems.extend(
            FileProblem(label, f.path, "missing", f.sha256, None) for f in ref.files
        )
        return None
    # Only the pinned module files matter in a code repo; other files there are not loaded.
    return _Target(label, snapshot, hub.snapshot_boundary(snapshot), ref.files)


def _download_checked(
    role: str,
    repo: str,
    commit: str,
    files: tuple[LockedFile, ...],
    report: VerifyReport,
) -> Path | None:
    """Download the locked files into a staging cache, verify them, and only then keep them."""
    with hub.staging_cache() as staging:
        for f in files:
            hub.download(repo, commit, f.path, staging)
        snapshot = hub.snapshot_folder(repo, commit, staging)
        staged = _Target(role, snapshot, hub.snapshot_boundary(snapshot), files)
        # A scratch report: the kept snapshot is compared again (and counted) by the caller.
        scratch = VerifyReport(problems=[], locations={})
        _compare(staged, None, NO_PROGRESS, scratch)
        if scratch.problems:
            report.problems.extend(scratch.problems)
            return None
        return hub.install_snapshot(repo, commit, staging)


def _compare(
    target: _Target, cache: StatCache | None, progress: Progress, report: VerifyReport,
) -> None:
    """Compare one folder with its locked files, appending problems to `report`: one `stat` per
    locked file answers the size check and the stat cache; only the files it does not answer
    for are read."""
    role = target.role
    on_disk, unsafe = list_folder(absolute_root(target.folder), target.boundary)
    # a code repo or an upstream: only the files locked matter, the rest are not loaded
    listed_only = ":code:" in role or role in UPSTREAM
    for entry in unsafe:
        report.problems.append(FileProblem(role, entry.path, entry.kind, None, entry.detail))
    unsafe_paths = {u.path for u in unsafe}
    matched: dict[str, LockedFile] = {}  # path on disk -> its locked file, in the lock's order
    found: dict[str, str] = {}  # the stat cache's answers, from the one stat taken here
    stats: dict[str, os.stat_result] = {}  # the files it does not answer for
    lookup = cache.lookup if cache is not None else None
    listed = 0  # locked paths the walk found
    for locked in target.files:
        if not is_safe_relpath(locked.path):
            report.problems.append(FileProblem(role, locked.path, "path", None, "unsafe path"))
            continue
        path = on_disk.get(locked.path)
        if path is None:
            if locked.path not in unsafe_paths:
                report.problems.append(
                    FileProblem(role, locked.path, "missing", locked.sha256, None)
                )
            continue
        listed += 1
        try:
            st = os.stat(path)
        except OSError as error:
            report.problems.append(FileProblem(role, locked.path, "path", None,
                                               f"cannot be read ({error.strerror or error})"))
            continue
        if st.st_size != locked.size:
            report.problems.append(
                FileProblem(role, locked.path, "size", str(locked.size), str(st.st_size))
            )
            continue
        matched[path] = locked
        if lookup is not None and (hit := lookup(stat_key(st, path))) is not None:
            found[path] = hit
        else:
            stats[path] = st
    if len(on_disk) > listed:  # else every file listed is a locked one
        locked_paths = {f.path for f in target.files}
        for rel in sorted(set(on_disk) - locked_paths):
            # an upstream's file of a compared name is read as the reference: locked or refused
            if not listed_only or (role in UPSTREAM and is_upstream_file(rel)):
                report.problems.append(FileProblem(role, rel, "extra", None,
                                                   "not in the lockfile"))
    report.cache_hits += len(found)
    report.bytes_hashed += sum(st.st_size for st in stats.values())
    hashes = {**found, **hash_files(stats, cache=cache, progress=progress,
                                    stage_name=f"hashing {role}", stats=stats)}
    for path, locked in matched.items():
        report.digests[f"{role}/{locked.path}"] = hashes[path]
        if hashes[path] != locked.sha256:
            report.problems.append(
                FileProblem(role, locked.path, "sha256", locked.sha256, hashes[path])
            )
    report.files_checked += len(target.files)
