"""Parallel streaming hashing and the stat cache."""

from __future__ import annotations

import hashlib
import os

from dflash_guard.pins import hashing
from dflash_guard.pins.hashing import StatCache, hash_files, sha256_file


def test_parallel_hashes_equal_hashlib_across_chunk_boundaries(tmp_path, monkeypatch):
    monkeypatch.setattr(hashing, "CHUNK_BYTES", 1024)  # many chunks per file
    blobs = {f"f{i}": os.urandom(n) for i, n in enumerate((0, 1, 1023, 1024, 1025, 70_001))}
    for name, data in blobs.items():
        (tmp_path / name).write_bytes(data)
    got = hash_files([tmp_path / n for n in blobs], workers=3)
    assert {p.name: h for p, h in got.items()} == {
        n: hashlib.sha256(d).hexdigest() for n, d in blobs.items()
    }


def test_stat_cache_persists_and_forgets_changed_files(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"x" * 4096)
    store = tmp_path / "cache" / "statcache.json"
    cache = StatCache(store)
    hash_files([path], cache=cache)
    cache.save()
    reloaded = StatCache(store)
    assert reloaded.get(path) == sha256_file(path)
    path.write_bytes(b"y" * 4096)  # same size; ctime (and mtime) move on
    assert reloaded.get(path) is None


def test_damaged_stat_cache_only_costs_a_rehash(tmp_path):
    store = tmp_path / "statcache.json"
    store.write_text("{not json")
    path = tmp_path / "w.bin"
    path.write_bytes(b"abc")
    cache = StatCache(store)
    assert hash_files([path], cache=cache)[path] == hashlib.sha256(b"abc").hexdigest()
    cache.save()
    assert StatCache(store).get(path) == hashlib.sha256(b"abc").hexdigest()


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "a"))
    assert hashing.cache_dir() == tmp_path / "a"
    monkeypatch.delenv("DFLASH_GUARD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hashing.cache_dir() == tmp_path / "xdg" / "dflash-guard"


def test_verify_reports_hashing_progress_in_files_and_bytes(tmp_path, monkeypatch):
    """The library reports each folder's hashing as a stage (the CLI draws it): bytes up to the
    total, a large file's chunk by chunk, and the files done."""
    from dflash_guard.pins.resolve import build_lock
    from dflash_guard.pins.verify import verify_lock
    from tests.support.progress import Recorder

    monkeypatch.setattr(hashing, "CHUNK_BYTES", 1024)  # both files are large: read in chunks
    folder = tmp_path / "model"
    folder.mkdir()
    for name, size in (("a.bin", 5000), ("b.bin", 3000)):
        (folder / name).write_bytes(os.urandom(size))
    lock = build_lock({"target": str(folder)}).lock
    recorder = Recorder()
    report = verify_lock(lock, {"target": folder}, use_cache=False, progress=recorder)
    assert report.passed
    (hashed,) = recorder.stages
    assert (hashed.name, hashed.total, hashed.unit, hashed.ended) == (
        "hashing target", 8000, "bytes", True)
    assert sum(hashed.amounts) == 8000 and len(hashed.amounts) > 2  # chunks, then the files
    assert hashed.notes[-1] == "2/2 files"


def test_small_files_are_reported_a_batch_at_a_time(tmp_path, monkeypatch):
    from tests.support.progress import Recorder

    monkeypatch.setattr(hashing, "BATCH_FILES", 1)  # a batch a file: each is reported alone
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"f{i}")
        paths[-1].write_bytes(b"x" * (i + 1))
    recorder = Recorder()
    hash_files(paths, progress=recorder, stage_name="hashing these", workers=2)
    (hashed,) = recorder.stages
    assert (hashed.name, hashed.total, hashed.unit) == ("hashing these", 15, "bytes")
    assert sorted(hashed.amounts) == [1, 2, 3, 4, 5]
    assert sorted(hashed.notes) == [f"{n}/5 files" for n in range(1, 6)]


def test_files_the_cache_answers_are_not_hashed_again(tmp_path):
    from tests.support.progress import Recorder

    path = tmp_path / "f"
    path.write_bytes(b"abc")
    cache = StatCache(tmp_path / "cache.json")
    hash_files([path], cache=cache)
    recorder = Recorder()
    hash_files([path], cache=cache, progress=recorder)
    assert recorder.stages == []


def test_a_batch_of_small_files_is_one_report(tmp_path):
    from tests.support.progress import Recorder

    paths = []
    for i in range(5):
        paths.append(tmp_path / f"f{i}")
        paths[-1].write_bytes(b"x" * (i + 1))
    recorder = Recorder()
    hash_files(paths, progress=recorder)
    (hashed,) = recorder.stages
    assert (hashed.amounts, hashed.notes) == ([15], ["5/5 files"])
