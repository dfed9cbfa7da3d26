"""Fast, bounded-memory file hashing with a stat cache.

Large files are hashed in a thread pool: `hashlib` releases the GIL on large updates, so
threads use every core; each worker streams its file through one reusable 8 MiB buffer. Small
files are hashed in the calling thread, meanwhile. A stat cache maps
(dev, inode, size, mtime_ns, ctime_ns, path) to the sha256 so re-verifying unchanged files
costs a `stat` each. The cache lives under `$DFLASH_GUARD_CACHE_DIR` (default
`$XDG_CACHE_HOME/dflash-guard`), is written atomically and is authenticated with an HMAC under a
per-user key (see `StatCache` for the trust boundary).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from dflash_guard.errors import InputError
from dflash_guard.fileio import open_regular_stat, write_atomic
from dflash_guard.progress import BYTES, NO_PROGRESS, Progress, stage

CHUNK_BYTES = 8 * 1024 * 1024
SMALL_BUFFER_BYTES = 64 * 1024
BATCH_BYTES = 8 * 1024 * 1024  # small files are hashed in batches: one pool task per file costs
BATCH_FILES = 256              # more than hashing it
STAT_CACHE_MAX_ENTRIES = 200_000
CACHE_MAX_BYTES = 256 * 1024 * 1024
CACHE_MAGIC = "dflash-guard-statcache-v2 hmac-sha256"
KEY_FILE = "statcache.key"
INLINE_BYTES = 16 * 1024  # smaller files are hashed in the calling thread (`digest_files`)
P = TypeVar("P", str, Path)  # a path as the caller names it
# A file to hash: the caller's path, its name, its stat (None: it failed), its stat key (None:
# uncached).
Todo = tuple[P, str, os.stat_result | None, str | None]
KEY_BYTES = 32


def cache_dir() -> Path:
    """dflash-guard's own cache folder (the stat cache), read from the environment each call."""
    if explicit := os.environ.get("DFLASH_GUARD_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dflash-guard"


def state_dir() -> Path:
    """Where dflash-guard keeps per-user state that must not travel with its cache (the stat
    cache's key): `$DFLASH_GUARD_STATE_DIR`, else `$XDG_STATE_HOME/dflash-guard`, else
    `~/.local/state/dflash-guard`; read from the environment each call."""
    if explicit := os.environ.get("DFLASH_GUARD_STATE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                             "state")
    return Path(base) / "dflash-guard"


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The sha256 of a regular file, read in chunks into one buffer (memory bounded by
    CHUNK_BYTES); a file under SMALL_BUFFER_BYTES is read with plain `os.read` calls (no buffer
    to zero, no file object: those dominate 100k tiny files). A file that cannot be opened or
    read, or is not a regular file, is an `InputError`."""
    return _hash_path(os.fspath(path), None, None)[0]


def _hash_path(name: str, seen: os.stat_result | None,
               on_bytes: Callable[[int], None] | None) -> tuple[str, int, bool]:
    """(sha256, bytes hashed, unchanged) of the regular file `name`. `unchanged`: `seen` (a stat
    taken earlier) describes the file opened, its identity and times held until the end of the
    read, and every byte of its size was hashed; only then may the digest be cached under it
    (an `fstat` of the open file, no second stat of the path). An `InputError` as
    `sha256_file`."""
    digest = hashlib.sha256()
    hashed = 0
    try:  # never blocks: a FIFO swapped in for a file is refused after opening (fstat)
        fd, opened = open_regular_stat(name)
        try:
            size = opened.st_size
            if size < SMALL_BUFFER_BYTES:
                # Asked for a byte more than its size, a first read that returns exactly the
                # size has met the end (a regular file reads short only there): one read, not
                # two. A file that grew or shrank is read on to its end.
                chunk = os.read(fd, size + 1)
                while chunk:
                    digest.update(chunk)
                    hashed += len(chunk)
                    if on_bytes is not None:
                        on_bytes(len(chunk))
                    if len(chunk) == size == hashed:
                        break
                    chunk = os.read(fd, SMALL_BUFFER_BYTES)
            else:
                buffer = bytearray(min(CHUNK_BYTES, size))
                view = memoryview(buffer)
                while n := os.readv(fd, [buffer]):
                    digest.update(view[:n])
                    hashed += n
                    if on_bytes is not None:
                        on_bytes(n)
            unchanged = (seen is not None and hashed == seen.st_size
                         and _identity(seen) == _identity(opened) == _identity(os.fstat(fd)))
        finally:
            os.close(fd)
    except InputError:
        raise
    except OSError as error:
        raise InputError(f"cannot read {name}: {error.strerror or error}") from None
    return digest.hexdigest(), hashed, unchanged


def git_blob_id(data: bytes) -> str:
    """The git blob SHA-1 of `data` (what the Hub reports as `blob_id` for non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def stat_key(st: os.stat_result, name: str) -> str:
    """The identity a cached digest is bound to: (dev, inode, size, mtime_ns, ctime_ns, path),
    from the file's `stat` and its absolute path `name`.

    (dev, inode) name the file whatever path leads to it (a link is followed by `stat`), so a
    copy or a swapped link never inherits an entry; `ctime` cannot be set by a user (`touch -d`
    moves it on), so a rewritten file never keeps its key. The absolute path is kept for
    readability (a `realpath` per file would cost more than the rest of a cached verify)."""
    return f"{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{name}"


def _stat_key(path: str | os.PathLike[str], st: os.stat_result | None = None) -> str:
    """`stat_key` of `path` (`st`: its `os.stat` when the caller just took it)."""
    name = os.fspath(path)
    return stat_key(os.stat(name) if st is None else st,
                    name if name.startswith("/") else os.path.abspath(name))


def _read_private(path: Path, limit: int) -> bytes | None:
    """The bytes of `path` when it is a regular file owned by this user that nobody else can
    read or write (and not larger than `limit`); None otherwise. Opened without following a
    symlink and without blocking (a FIFO never hangs), then checked with `fstat`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()
                or st.st_mode & 0o077 or st.st_size > limit):
            return None
        return handle.read(limit + 1)[:limit]


def _cache_key(path: Path) -> bytes | None:
    """The per-user secret that authenticates the stat cache: the key file's 32 random bytes
    (created 0600 on first use) bound to the key file's own identity (device, inode, change
    time), so a key copied elsewhere, or restored with a cache folder, is another key. None when
    the file exists but is not private to this user: then the cache is neither read nor
    written."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        key = _read_private(path, KEY_BYTES)
        if key is None or len(key) != KEY_BYTES:
            return None
    except OSError:
        return None
    else:
        key = secrets.token_bytes(KEY_BYTES)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return key + f"\0{st.st_dev}\0{st.st_ino}\0{st.st_ctime_ns}".encode()


class StatCache:
    """(dev, inode, size, mtime_ns, ctime_ns, path) -> sha256, persisted as one file.

    The trust boundary: the cache can only save time, never change a verdict. The file is
    authenticated with HMAC-SHA256 under a per-user secret key kept outside the cache folder
    (`state_dir()/statcache.key`, 0600, owner and mode checked) and bound to that key file's
    device, inode and change time: nothing a copy can carry. A cache whose MAC does not verify,
    including any entry planted by someone without the key and a cache folder restored with a
    key of its own (a CI cache, a copied home), is ignored as a whole and costs a full hash.
    Entries are bound to each file's identity (`_stat_key`). The gate does not use the cache at
    all: it hashes every file, and its record carries those digests.
    """

    def __init__(self, path: Path | None = None, key_file: Path | None = None) -> None:
        self.path = path if path is not None else cache_dir() / "statcache.json"
        self._key = _cache_key(key_file if key_file is not None else state_dir() / KEY_FILE)
        self._entries: dict[str, str] = {}
        self._dirty = False
        data = _read_private(self.path, CACHE_MAX_BYTES) if self._key is not None else None
        if data is not None:
            self._entries = self._authenticated(data)

    def _mac(self, body: bytes) -> str:
        assert self._key is not None
        return hmac.new(self._key, body, hashlib.sha256).hexdigest()

    def _authenticated(self, data: bytes) -> dict[str, str]:
        """The entries of a cache file whose MAC verifies; else none (a damaged or forged
        cache only costs a full hash)."""
        header, _, body = data.partition(b"\n")
        expected = f"{CACHE_MAGIC} {self._mac(body)}".encode()
        if not hmac.compare_digest(header, expected):
            return {}
        try:
            loaded = json.loads(body)
        except ValueError:
            return {}
        if not isinstance(loaded, dict):
            return {}
        if all(type(v) is str for v in loaded.values()):  # as written: no copy of 100k entries
            return loaded
        return {k: v for k, v in loaded.items() if isinstance(v, str)}

    def get(self, path: str | os.PathLike[str]) -> str | None:
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
        """Write the cache atomically, with its MAC; a failure to write is not an error (it is
        only a cache), and without a private key nothing is written."""
        if not self._dirty or self._key is None:
            return
        entries = self._entries
        if len(entries) > STAT_CACHE_MAX_ENTRIES:
            entries = dict(list(entries.items())[-STAT_CACHE_MAX_ENTRIES:])
        body = json.dumps(entries, separators=(",", ":")).encode()
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(self.path, f"{CACHE_MAGIC} {self._mac(body)}\n".encode() + body,
                         own_state=True)
            os.chmod(self.path, 0o600)
            self._dirty = False
        except OSError:  # WriteError is one
            pass


def hash_files(
    paths: Iterable[P],
    *,
    cache: StatCache | None = None,
    progress: Progress = NO_PROGRESS,
    stage_name: str = "hashing",
    workers: int | None = None,
    stats: Mapping[P, os.stat_result] | None = None,
) -> dict[P, str]:
    """The sha256 of each path (`digest_files` without the sizes)."""
    return {path: sha for path, (sha, _) in digest_files(
        paths, cache=cache, progress=progress, stage_name=stage_name, workers=workers,
        stats=stats).items()}


def digest_files(
    paths: Iterable[P],
    *,
    cache: StatCache | None = None,
    progress: Progress = NO_PROGRESS,
    stage_name: str = "hashing",
    workers: int | None = None,
    stats: Mapping[P, os.stat_result] | None = None,
) -> dict[P, tuple[str, int]]:
    """(sha256, size) of each path; answers from `cache` when the stat identity matches.

    Each file is stat-ed once (or its `stats` entry, a stat the caller just took, is used), then
    opened and read; its size is the bytes hashed. Files under INLINE_BYTES are hashed in this
    thread: for them a pool task costs more than the hashing, and the GIL serialises it anyway
    (`hashlib` releases it only for large updates). Larger files go to a thread pool in batches
    (up to BATCH_FILES files or BATCH_BYTES, a large file alone), hashed meanwhile. A file whose
    identity changes while it is hashed is not cached (it may be mid-write). The files the cache
    does not answer for are hashed as the stage `stage_name` of `progress`, in bytes, with the
    files done as its note (reported a batch at a time).
    """
    results: dict[P, tuple[str, int]] = {}
    small: list[Todo[P]] = []
    large: list[Todo[P]] = []
    lookup = cache._entries.get if cache is not None else None  # the hot loop: no method call
    for path in paths:
        name = os.fspath(path)
        try:
            st = stats[path] if stats is not None else os.stat(name)
        except OSError:
            small.append((path, name, None, None))  # hashing will report it
            continue
        key = None
        if lookup is not None:
            key = stat_key(st, name if name.startswith("/") else os.path.abspath(name))
            if (hit := lookup(key)) is not None:
                results[path] = (hit, st.st_size)
                continue
        (small if st.st_size < INLINE_BYTES else large).append((path, name, st, key))

    if not small and not large:
        return results
    meter = _Meter(progress, len(small) + len(large))

    def work(batch: list[Todo[P]]) -> None:
        # Results and cache entries are written here, from the pool's threads and this one:
        # one dict store each, atomic under the GIL.
        small_bytes = 0
        for path, name, seen, key in batch:
            chunked = seen is not None and seen.st_size >= CHUNK_BYTES  # reported as read
            sha, size, unchanged = _hash_path(name, seen if key is not None else None,
                                              meter.read if chunked else None)
            results[path] = (sha, size)
            if unchanged and cache is not None and key is not None:
                cache.put(key, sha)
            small_bytes += 0 if chunked else size
        meter.hashed(len(batch), small_bytes)

    total = sum(seen.st_size for _, _, seen, _ in small + large if seen is not None)
    with (stage(progress, stage_name, total, BYTES),
          ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool):
        hashed_meanwhile = pool.map(work, _batches(large))
        for batch in _batches(small):
            work(batch)
        for _ in hashed_meanwhile:  # a worker's error is raised here
            pass
    return results


class _Meter:
    """Hashing's progress from the pool's threads and this one, passed on one call at a time:
    bytes as a large file is read, a batch's other bytes when it is done, and the files done."""

    def __init__(self, progress: Progress, files: int) -> None:
        self._progress = progress
        self._files = files
        self._hashed = 0
        self._lock = threading.Lock()

    def read(self, size: int) -> None:
        with self._lock:
            self._progress.advanced(size, f"{self._hashed}/{self._files} files")

    def hashed(self, files: int, size: int) -> None:
        with self._lock:
            self._hashed += files
            self._progress.advanced(size, f"{self._hashed}/{self._files} files")


def _batches(items: list[Todo[P]]) -> Iterator[list[Todo[P]]]:
    """Consecutive items grouped up to BATCH_FILES files or BATCH_BYTES (a file that could not
    be stat-ed alone: it is an error)."""
    batch: list[Todo[P]] = []
    size = 0
    for item in items:
        size += item[2].st_size if item[2] is not None else BATCH_BYTES
        batch.append(item)
        if size >= BATCH_BYTES or len(batch) >= BATCH_FILES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
