"""Issue 15, Scale: the fast paths (libyaml, direct YAML nodes, batched hashing) change no result.

Timing is measured by `benchmarks/bench_lock_scale.py`, never asserted here."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from dflash_guard import schema
from dflash_guard.pins import hashing
from dflash_guard.pins.lockfile import _node, parse_lockfile
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
