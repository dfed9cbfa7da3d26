"""The only place that talks to the Hugging Face Hub or reads the HF cache.

All requests go through `huggingface_hub`. The environment (`HF_ENDPOINT`, `HF_HOME`,
`HF_HUB_CACHE`, `HF_HUB_OFFLINE`, `HF_TOKEN`) is read at each call, not at import, and the endpoint
and cache folder are passed to the client explicitly, so a changed environment always takes effect.
Every client error becomes one `HubError` line naming the repo, revision and status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard.errors import HubError, InputError
from dflash_guard.fileio import read_regular
from dflash_guard.patterns import COMMIT_RE, REPO_AT_REV_RE

if TYPE_CHECKING:
    from huggingface_hub import HfApi

DEFAULT_ENDPOINT = "https://huggingface.co"


@dataclasses.dataclass(frozen=True)
class HubFile:
    """One file of a repo at a commit as the Hub describes it."""

    path: str
    size: int
    blob_id: str | None
    lfs_sha256: str | None


@dataclasses.dataclass(frozen=True)
class RepoState:
    """A repo resolved to a commit, with its file list."""

    repo: str
    revision: str | None
    commit: str
    files: tuple[HubFile, ...]


# --- environment -------------------------------------------------------------------------------


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def endpoint() -> str:
    """The Hub endpoint: `$HF_ENDPOINT` or huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_cache_dir() -> Path:
    """`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`."""
    if explicit := os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.path.expanduser(explicit))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface",
    )
    return Path(os.path.expanduser(home)) / "hub"


def is_offline() -> bool:
    """`HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) is set."""
    return _truthy(os.environ.get("HF_HUB_OFFLINE")) or _truthy(
        os.environ.get("TRANSFORMERS_OFFLINE")
    )


def timeout_s() -> float:
    """Per-request timeout in seconds (`$DFLASH_GUARD_HUB_TIMEOUT`, default 30)."""
    try:
        return float(os.environ.get("DFLASH_GUARD_HUB_TIMEOUT", "30"))
    except ValueError:
        raise InputError("DFLASH_GUARD_HUB_TIMEOUT must be a number of seconds") from None


# --- sources and the cache layout ----------------------------------------------------------------


def parse_hub_source(src: str) -> tuple[str, str | None] | None:
    """`ORG/NAME[@REV]` -> (repo, rev), or None when `src` is not of that shape."""
    match = REPO_AT_REV_RE.match(src)
    return (match["repo"], match["rev"]) if match else None


def repo_folder(repo: str, cache: Path | None = None) -> Path:
    """`<cache>/models--ORG--NAME`."""
    return (cache or hub_cache_dir()) / ("models--" + repo.replace("/", "--"))


def snapshot_folder(repo: str, commit: str, cache: Path | None = None) -> Path:
    """`<cache>/models--ORG--NAME/snapshots/<commit>` (whether or not it exists)."""
    return repo_folder(repo, cache) / "snapshots" / commit


def snapshot_boundary(snapshot: Path) -> Path:
    """The repo folder a snapshot's links may point into (its `blobs/` live there)."""
    return snapshot.resolve().parent.parent


def enclosing_repo_folder(path: Path) -> Path | None:
    """The repo folder of the HF-cache snapshot holding `path` (files link into its `blobs/`),
    or None when `path` is not inside a cached snapshot."""
    for folder in [path, *path.parents]:
        repo = folder.parent.parent
        if folder.parent.name == "snapshots" and (repo / "blobs").is_dir():
            return repo
    return None


def cached_snapshot(repo: str, commit: str, cache: Path | None = None) -> Path | None:
    """The cached snapshot folder of `repo` at `commit`, if present."""
    path = snapshot_folder(repo, commit, cache)
    return path if path.is_dir() else None


def cached_commit(repo: str, revision: str | None, cache: Path | None = None) -> str | None:
    """Resolve `revision` (default `main`) from the cache: `refs/<rev>` or a cached snapshot sha."""
    rev = revision or "main"
    if COMMIT_RE.match(rev):
        return rev if cached_snapshot(repo, rev, cache) else None
    ref = repo_folder(repo, cache) / "refs" / rev
    with contextlib.suppress(OSError, InputError, UnicodeDecodeError):  # a ref is 40 hex digits
        commit = read_regular(ref, 1024).decode("utf-8").strip()
        if COMMIT_RE.match(commit):
            return commit
    return None


def snapshot_identity(path: Path) -> tuple[str, str] | None:
    """(repo, commit) when `path` is `.../models--ORG--NAME/snapshots/<sha>`, else None."""
    resolved = path.resolve()
    commit, snapshots, folder = resolved.name, resolved.parent.name, resolved.parent.parent.name
    if snapshots != "snapshots" or not COMMIT_RE.match(commit) or not folder.startswith("models--"):
        return None
    parts = folder[len("models--"):].split("--")
    if len(parts) != 2 or not all(parts):
        return None
    return "/".join(parts), commit


def cached_blob_id(snapshot_file: Path) -> str | None:
    """The git blob id a cached file is stored under (non-LFS blobs are named by it), if any."""
    if not snapshot_file.is_symlink():
        return None
    name = Path(os.readlink(snapshot_file)).name
    return name if COMMIT_RE.match(name) else None


# --- talking to the Hub ------------------------------------------------------------------------


@contextlib.contextmanager
def hub_errors(repo: str, revision: str | None) -> Iterator[None]:
    """Turn any client or transport error into one `HubError` line."""
    import httpx2
    from huggingface_hub import errors as hf_errors

    where = f"{repo}@{revision or 'main'}"
    client_log = logging.getLogger("huggingface_hub")
    level = client_log.level
    client_log.setLevel(logging.ERROR)  # retry chatter would break the one-line contract
    try:
        yield
    except hf_errors.OfflineModeIsEnabled:
        raise HubError(f"hub: {where}: HF_HUB_OFFLINE is set and it is not cached") from None
    except hf_errors.RevisionNotFoundError:
        raise HubError(f"hub: {where}: revision not found (404)") from None
    except hf_errors.GatedRepoError as error:
        raise HubError(f"hub: {where}: gated repo, access refused ({_status(error)})") from None
    except hf_errors.RepositoryNotFoundError as error:
        raise HubError(
            f"hub: {where}: repository not found or not accessible ({_status(error)})"
        ) from None
    except hf_errors.RemoteEntryNotFoundError as error:
        raise HubError(f"hub: {where}: file not found ({_status(error)})") from None
    except hf_errors.HfHubHTTPError as error:
        raise HubError(f"hub: {where}: HTTP {_status(error)} from {endpoint()}") from None
    except httpx2.TimeoutException:
        raise HubError(f"hub: {where}: timed out after {timeout_s():g}s ({endpoint()})") from None
    except httpx2.RemoteProtocolError as error:
        raise HubError(f"hub: {where}: truncated download ({error})") from None
    except httpx2.HTTPError as error:
        raise HubError(f"hub: {where}: {type(error).__name__}: {error}") from None
    except hf_errors.LocalEntryNotFoundError as error:
        raise HubError(f"hub: {where}: {str(error).splitlines()[0]}") from None
    except (OSError, ValueError) as error:  # consistency checks: truncated body, bad size
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise HubError(f"hub: {where}: download failed: {first}") from None
    finally:
        client_log.setLevel(level)


def _status(error: Exception) -> str:
    response = getattr(error, "response", None)
    return str(getattr(response, "status_code", "?"))


def _api() -> HfApi:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint())


def resolve_repo(repo: str, revision: str | None) -> RepoState:
    """Ask the Hub which commit `revision` names and list its files with sizes and hashes."""
    if is_offline():
        raise HubError(f"hub: {repo}@{revision or 'main'}: HF_HUB_OFFLINE is set")
    with hub_errors(repo, revision):
        info = _api().model_info(
            repo, revision=revision, files_metadata=True, timeout=timeout_s()
        )
    if not info.sha or not COMMIT_RE.match(info.sha) or info.siblings is None:
        raise HubError(f"hub: {repo}@{revision or 'main'}: the answer has no commit or file list")
    files = tuple(
        HubFile(
            path=s.rfilename,
            size=s.lfs.size if s.lfs else (s.size or 0),
            blob_id=s.blob_id,
            lfs_sha256=s.lfs.sha256 if s.lfs else None,
        )
        for s in info.siblings
    )
    return RepoState(repo=repo, revision=revision, commit=info.sha, files=files)


def download(repo: str, commit: str, path: str, cache: Path) -> Path:
    """Fetch one file at `commit` into the HF-cache layout under `cache`; return its path."""
    from huggingface_hub import hf_hub_download

    with hub_errors(repo, commit):
        return Path(
            hf_hub_download(
                repo,
                path,
                revision=commit,
                cache_dir=cache,
                endpoint=endpoint(),
                etag_timeout=timeout_s(),
            )
        )


@contextlib.contextmanager
def staging_cache(parent: Path | None = None) -> Iterator[Path]:
    """A temporary HF-cache folder, removed on exit whatever happens.

    Downloads land here first and are checked before anything is kept, so a failed or tampered
    download never leaves a partial entry in the real cache.
    """
    base = parent or hub_cache_dir()
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=".dflash-guard-staging-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def install_snapshot(repo: str, commit: str, staging: Path, cache: Path | None = None) -> Path:
    """Move a checked snapshot from `staging` into the real cache (blobs, then snapshot links)."""
    cache = cache or hub_cache_dir()
    source = snapshot_folder(repo, commit, staging)
    dest_repo = repo_folder(repo, cache)
    dest = snapshot_folder(repo, commit, cache)
    (dest_repo / "blobs").mkdir(parents=True, exist_ok=True)
    for entry in sorted(p for p in source.rglob("*") if p.is_symlink() or p.is_file()):
        rel = entry.relative_to(source)
        dest_file = dest / rel
        dest_file.parent.mkdir(parents=True, exist_ok=True)
        if dest_file.is_symlink() or dest_file.exists():
            dest_file.unlink()
        if not entry.is_symlink():  # a cache written without symlinks holds plain files
            os.replace(entry, dest_file)
            continue
        blob = Path(os.path.realpath(entry))
        target_blob = dest_repo / "blobs" / blob.name
        if not target_blob.exists():
            os.replace(blob, target_blob)
        dest_file.symlink_to(os.path.relpath(target_blob, dest_file.parent))
    return dest
