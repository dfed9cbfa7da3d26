"""Issue 15 item 1: a planted stat-cache entry cannot make the gate approve a tampered file;
the approval record carries the digests computed in the run."""

from __future__ import annotations

import hashlib
import json

from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.pins import hashing
from dflash_guard.trust.provenance import read_approval
from tests.support.trust import copy_folder, write_lock, write_policy


def test_gate_ignores_a_planted_cache_entry(locked_pair, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(cache))
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    weights = drafter / "model.safetensors"
    locked = locked_pair.lock.artifact("drafter").file("model.safetensors").sha256
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    cache.mkdir()
    (cache / "statcache.json").write_text(json.dumps({hashing._stat_key(weights): locked}))
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = run_gate(GateOptions(lock, write_policy(tmp_path / "policy"),
                                  {"target": locked_pair.target, "drafter": drafter},
                                  out=tmp_path / "approval.json"))
    assert not result.approved
    assert result.reason.startswith("verify: drafter/model.safetensors: sha256 differs")
    assert not (tmp_path / "approval.json").exists()


def test_record_subjects_are_hashed_from_disk(locked_pair, tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "cache"))
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    out = tmp_path / "approval.json"
    result = run_gate(GateOptions(lock, write_policy(tmp_path / "policy"), locked_pair.roots,
                                  out=out))
    assert result.approved, result.reason
    subjects = {s["name"]: s["digest"]["sha256"] for s in read_approval(out)["subject"]}
    for role, folder in locked_pair.roots.items():
        for f in locked_pair.lock.artifact(role).files:
            on_disk = hashlib.sha256((folder / f.path).read_bytes()).hexdigest()
            assert subjects[f"{role}/{f.path}"] == on_disk
