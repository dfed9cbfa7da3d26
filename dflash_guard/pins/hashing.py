"""Fast, bounded-memory file hashing with a stat cache.

Files are hashed in a thread pool: `hashlib` releases the GIL on large updates, so threads use
every core. Each worker streams its file through one reusable 8 MiB buffer. A stat cache maps
(realpath, size, mtime_ns, inode, ctime_ns) to the sha256 so re-verifying unchanged files costs a
`stat` each. The cache lives under `$DFLASH_GUARD_CACHE_DIR` (default
`$XDG_CACHE_HOME/dflash-guard`) and is written atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.fileio import open_regular, read_regular, write_atomic

CHUNK_BYTES = 8 * 1024 * 1024
STAT_CACHE_MAX_ENTRIES = 200_000
STAT_CACHE_MAX_BYTES = 512 * 1024 * 1024


def cache_dir() -> Path:
    """dflash-guard's own cache folder (the stat cache), read from the environment each call."""
    if explicit := os.environ.get("DFLASH_GUARD_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dflash-guard"


def sha256_file(path: str | os.PathLike[str], on_bytes: Callable[[int], None] | None = None) -> str:
    """The sha256 of a regular file, read in chunks into one buffer (memory bounded by
    CHUNK_BYTES); a file that cannot be opened or read, or is not a regular file, is an
    `InputError`."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    try:  # never blocks: a FIFO swapped in for a file is refused after opening (fstat)
        with os.fdopen(open_regular(path), "rb", buffering=0) as handle:
            while n := handle.readinto(buffer):
                digest.update(view[:n])
                if on_bytes is not None:
                    on_bytes(n)
    except InputError:
        raise
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror or error}") from None
    return digest.hexdigest()


def git_blob_id(data: bytes) -> str:
    """The git blob SHA-1 of `data` (what the Hub reports as `blob_id` for non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _stat_key(path: Path) -> str:
    real = os.path.realpath(path)
    st = os.stat(real)
    return f"{real}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_ctime_ns}"


class StatCache:
    """(realpath, size, mtime_ns, inode, ctime_ns) -> sha256, persisted as one JSON file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else cache_dir() / "statcache.json"
        self._entries: dict[str, str] = {}
        self._dirty = False
        try:
            loaded = json.loads(read_regular(self.path, STAT_CACHE_MAX_BYTES, nofollow=True))
            if isinstance(loaded, dict):
                self._entries = {k: v for k, v in loaded.items() if isinstance(v, str)}
        except (OSError, ValueError, InputError):
            self._entries = {}  # a missing or damaged cache only costs a full hash

    def get(self, path: Path) -> str | None:
        """The cached sha256 for `path` if its stat identity is unchanged."""
        try:
            key = _stat_key(path)
        except OSError:
            return None
        return self._entries.get(key)

    def lookup(self, key: str) -> str | None:
        """The sha256 stored under an exact stat key."""
        return self._entries.get(key)

    def put(self, key: str, sha256: str) -> None:
        """Remember `sha256` under a stat key taken before hashing."""
        self._entries[key] = sha256
        self._dirty = True

    def save(self) -> None:
        """Write the cache atomically; a failure to write is not an error (it is only a cache)."""
        if not self._dirty:
            return
        entries = self._entries
        if len(entries) > STAT_CACHE_MAX_ENTRIES:
            entries = dict(list(entries.items())[-STAT_CACHE_MAX_ENTRIES:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(entries, separators=(",", ":")))
            self._dirty = False
        except OSError:
            pass


def hash_files(
    paths: Iterable[Path],
    *,
    cache: StatCache | None = None,
    on_bytes: Callable[[int], None] | None = None,
    workers: int | None = None,
) -> dict[Path, str]:
    """sha256 of each path, in parallel; answers from `cache` when the stat identity matches.

    A file whose stat identity changes while it is hashed is not cached (it may be mid-write).
    """
    results: dict[Path, str] = {}
    todo: list[tuple[Path, str | None]] = []
    for path in paths:
        key: str | None = None
        if cache is not None:
            with contextlib.suppress(OSError):
                key = _stat_key(path)
            if key is not None and (hit := cache.lookup(key)) is not None:
                results[path] = hit
                continue
        todo.append((path, key))

    def work(item: tuple[Path, str | None]) -> tuple[Path, str, str | None]:
        path, key = item
        sha = sha256_file(path, on_bytes)
        if key is not None and _stat_key(path) != key:
            key = None
        return path, sha, key

    if todo:
        with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            for path, sha, key in pool.map(work, todo):
                results[path] = sha
                if cache is not None and key is not None:
                    cache.put(key, sha)
    return results
