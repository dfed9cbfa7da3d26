"""Issue 15 item 1: the stat cache can only save time, never change a verdict.

An attacker who can write the cache file (a CI cache restored from an untrusted branch) but not
read the per-user key cannot make a tampered file pass: a forged entry is ignored."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from dflash_guard.pins import hashing
from dflash_guard.pins.hashing import StatCache, hash_files, sha256_file
from dflash_guard.pins.lockfile import load_lockfile
from dflash_guard.pins.verify import verify_lock


def plant_entry(cache_file, path, sha256: str, header: str | None = None) -> None:
    """Write a cache file mapping `path`'s current stat identity to `sha256`, without the key
    (plain JSON, or after a header carrying a made-up MAC)."""
    body = json.dumps({hashing._stat_key(path): sha256})
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(body if header is None else f"{header}\n{body}")
    cache_file.chmod(0o600)


@pytest.mark.parametrize("header", [None, f"{hashing.CACHE_MAGIC} {'0' * 64}"])
def test_forged_cache_entry_does_not_make_a_tampered_file_pass(cli, local_pair, tmp_path,
                                                                monkeypatch, header):
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "cache"))
    target, drafter = local_pair.target, local_pair.drafter
    lock_path = tmp_path / "dflash.lock"
    assert cli("lock", "--target", target, "--drafter", drafter, "-o", lock_path).exit_code == 0
    locked = load_lockfile(lock_path).artifact("drafter").file("model.safetensors")
    weights = drafter / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # same size, different bytes
    weights.write_bytes(bytes(data))
    plant_entry(tmp_path / "cache" / "statcache.json", weights, locked.sha256, header)

    report = verify_lock(load_lockfile(lock_path), {"target": target, "drafter": drafter})
    assert not report.passed
    assert [(p.path, p.kind) for p in report.problems] == [("model.safetensors", "sha256")]
    assert report.digests["drafter/model.safetensors"] == sha256_file(weights)
    r = cli("verify", "--lock", lock_path, "--root", f"target={target}",
            "--root", f"drafter={drafter}")
    assert r.exit_code == 1


def test_cache_written_by_us_is_used_and_bound_to_the_key(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"abc")
    store, key = tmp_path / "cache" / "statcache.json", tmp_path / "state" / hashing.KEY_FILE
    cache = StatCache(store, key)
    hash_files([path], cache=cache)
    cache.save()
    assert key.stat().st_mode & 0o777 == 0o600 and not (store.parent / hashing.KEY_FILE).exists()
    assert StatCache(store, key).get(path) == sha256_file(path)
    key.write_bytes(os.urandom(hashing.KEY_BYTES))  # another key
    assert StatCache(store, key).get(path) is None


def test_a_cache_restored_with_its_key_is_rehashed_not_believed(tmp_path):
    """Issue 34: a cache folder and key copied from elsewhere (a CI cache, a copied home)
    carry bytes, never the key file's identity, so none of their entries is believed."""
    path = tmp_path / "w.bin"
    path.write_bytes(b"abc")
    store, key = tmp_path / "home" / "statcache.json", tmp_path / "home" / hashing.KEY_FILE
    cache = StatCache(store, key)
    hash_files([path], cache=cache)
    cache.save()
    assert StatCache(store, key).get(path) is not None
    restored = tmp_path / "restored"
    shutil.copytree(store.parent, restored)  # the same bytes, key and cache, somewhere else
    assert StatCache(restored / store.name, restored / key.name).get(path) is None
    key.rename(tmp_path / "aside")  # the same key file put back by a copy: another inode
    shutil.copy2(tmp_path / "aside", key)
    assert StatCache(store, key).get(path) is None


def test_a_key_others_can_read_disables_the_cache(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"abc")
    store, key = tmp_path / "cache" / "statcache.json", tmp_path / "state" / hashing.KEY_FILE
    cache = StatCache(store, key)
    hash_files([path], cache=cache)
    cache.save()
    key.chmod(0o644)
    exposed = StatCache(store, key)
    assert exposed.get(path) is None
    store.unlink()
    hash_files([path], cache=exposed)
    exposed.save()
    assert not store.exists()  # nothing is written under a key that is not private


def test_a_fifo_as_cache_file_does_not_hang(tmp_path):
    store = tmp_path / "cache" / "statcache.json"
    store.parent.mkdir()
    os.mkfifo(store, 0o600)
    assert StatCache(store).get(tmp_path) is None
