"""Issues 15 and 37, Scale: the fast paths (libyaml, direct YAML nodes, batched hashing, one stat
and one open per file) change no result.

Timing is measured by `benchmarks/bench_lock_scale.py`, never asserted here."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import os
from pathlib import Path

import pytest
import yaml

from dflash_guard import schema
from dflash_guard.pins import hashing
from dflash_guard.pins.folder import absolute_root
from dflash_guard.pins.gcpause import paused_gc
from dflash_guard.pins.lockfile import _node, dumps_lockfile, parse_lockfile
from dflash_guard.pins.resolve import build_lock
from dflash_guard.pins.verify import verify_lock
from tests.support.trust import REPO


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_the_strict_reader_parses_with_libyaml():
    assert schema.SafeLoader is yaml.CSafeLoader


def test_lockfile_nodes_emit_what_safe_dump_writes():
    lock = yaml.safe_load((REPO / "lockfiles" / "example-qwen3-8b.lock").read_text())
    odd = {"s": ["x: y", "0123", "yes", "null", "#c", " lead", "é\u2028\nz", "a" * 150],
           "n": [0, -3, 10**20], "b": [True, False], "none": None, "empty": [], "map": {}}
    for doc in (lock, odd):
        assert yaml.serialize(_node(doc), Dumper=yaml.SafeDumper, width=100) == (
            yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100))


def test_reading_is_as_strict_with_libyaml(tmp_path):
    text = (REPO / "lockfiles" / "fixture.lock").read_text()
    with pytest.raises(Exception, match=r"x.lock:\d+: .*python"):
        parse_lockfile(text.replace("tool_version: 0.1.0",
                                    "tool_version: !!python/object/apply:os.system [id]"), "x.lock")


def test_batched_hashing_of_many_small_files(tmp_path, monkeypatch):
    monkeypatch.setattr(hashing, "BATCH_FILES", 7)
    blobs = {f"f{i:04d}": b"%d" % i * (i % 5) for i in range(300)}
    for name, data in blobs.items():
        (tmp_path / name).write_bytes(data)
    got = hashing.hash_files([tmp_path / n for n in blobs], workers=3)
    assert {p.name: h for p, h in got.items()} == {
        n: hashlib.sha256(d).hexdigest() for n, d in blobs.items()}


# --- issue 37: one stat and one open per file -------------------------------------------------


def test_a_file_rewritten_after_its_stat_is_hashed_as_read_and_not_cached(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"old")
    stale = os.stat(path)
    path.write_bytes(b"new!")  # after the caller's stat, before the read
    cache = hashing.StatCache(tmp_path / "cache.json", tmp_path / "state" / hashing.KEY_FILE)
    got = hashing.digest_files([path], cache=cache, stats={path: stale})
    assert got == {path: (hashlib.sha256(b"new!").hexdigest(), 4)}  # what was read, its size
    assert cache._entries == {}  # neither under the stale stat nor the new one


def test_a_file_that_grows_while_read_is_hashed_to_its_end_and_not_cached(tmp_path, monkeypatch):
    path = tmp_path / "w.bin"
    path.write_bytes(b"x" * 10)
    opened = hashing.open_regular_stat

    def open_then_append(name):
        fd, st = opened(name)  # the stat says 10 bytes; the one read then finds 15
        with open(name, "ab") as writer:
            writer.write(b"y" * 5)
        return fd, st

    monkeypatch.setattr(hashing, "open_regular_stat", open_then_append)
    cache = hashing.StatCache(tmp_path / "cache.json", tmp_path / "state" / hashing.KEY_FILE)
    got = hashing.digest_files([path], cache=cache)
    assert got == {path: (hashlib.sha256(b"x" * 10 + b"y" * 5).hexdigest(), 15)}
    assert cache._entries == {}


def test_absolute_root_names_the_same_folder(tmp_path, monkeypatch):
    (tmp_path / "real" / "model").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "link").symlink_to(tmp_path / "real" / "model")
    monkeypatch.chdir(tmp_path / "work")
    assert absolute_root("link/./") == str(tmp_path / "work" / "link")  # normalised
    # After a symlink, `..` is the link target's parent: only the kernel knows, so kept.
    kept = absolute_root("link/../model")
    assert kept == str(tmp_path / "work" / "link/../model")
    assert os.path.samefile(kept, tmp_path / "real" / "model")
    assert absolute_root(tmp_path / "real") == str(tmp_path / "real")


def test_a_lock_by_one_spelling_answers_a_verify_by_another_from_the_cache(
        tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DFLASH_GUARD_STATE_DIR", str(tmp_path / "state"))
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    for i in range(3):
        (model / "sub" / f"f{i}.json").write_text("{}" * i)
    monkeypatch.chdir(tmp_path)
    lock = build_lock({"target": "model"}).lock
    assert lock is not None and [f.size for f in lock.artifacts[0].files] == [0, 2, 4]
    report = verify_lock(lock, {"target": Path("./model/")})
    assert report.passed and report.cache_hits == 3 and report.bytes_hashed == 0


def test_paused_gc_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # it was off: left off
    finally:
        gc.enable()


def test_a_locks_remembered_digest_is_its_own():
    """The digest is worked out once per lock; a replaced lock (another version) works out its
    own, and a parsed lock keeps the one it checked."""
    text = (REPO / "lockfiles" / "fixture.lock").read_text()
    lock = parse_lockfile(text, "fixture.lock")
    assert lock.digest() == yaml.safe_load(text)["digest"]
    older = dataclasses.replace(lock, lockfile_version=2)
    assert older.digest() != lock.digest()
    assert older.digest() == parse_lockfile(dumps_lockfile(older)).digest()
    assert dataclasses.replace(lock).digest() == lock.digest()
