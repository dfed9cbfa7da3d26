"""The lockfile model: round trip, determinism, digest, strict validation, the example lock."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from dflash_guard.errors import InputError
from dflash_guard.pins.lockfile import (
    Artifact,
    Engine,
    LockedFile,
    Lockfile,
    Package,
    dumps_lockfile,
    files_table,
    load_lockfile,
    parse_lockfile,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "lockfiles" / "example-qwen3-8b.lock"


def _lock(files_order: int = 1) -> Lockfile:
    files = (
        LockedFile("b.json", 2, "b" * 64, None),
        LockedFile("a.safetensors", 9, "a" * 64, "1" * 40),
    )
    drafter = Artifact("drafter", "local", None, None, None, files[::files_order], name="d")
    target = Artifact("target", "hub", "org/t", "main", "c" * 40, files[::files_order],
                      provenance="hub-confirmed")
    artifacts = (drafter, target) if files_order == 1 else (target, drafter)
    return Lockfile(
        artifacts=artifacts,
        engines=(Engine("vllm", "https://x/vllm.git", "e" * 40, "pr-1"),),
        packages=(Package("torch", "2.13.0", ("f" * 64,)),),
    )


def test_dumps_is_deterministic_sorted_and_round_trips():
    a, b = dumps_lockfile(_lock(1)), dumps_lockfile(_lock(-1))
    assert a == b  # input order does not matter
    assert a.index("role: target") < a.index("role: drafter")
    assert a.index(" a.safetensors\n") < a.index(" b.json\n")  # one table row per file
    parsed = parse_lockfile(a)
    assert parsed.digest() == _lock(1).digest()
    assert dumps_lockfile(parsed) == a
    assert parsed.artifact("target").file("a.safetensors").blob_id == "1" * 40
    assert parsed.artifact("gguf") is None


def test_digest_changes_with_any_content():
    base = _lock()
    changed = Lockfile(base.artifacts, (Engine("vllm", "https://x/vllm.git", "d" * 40, "pr-1"),),
                       base.packages)
    assert base.digest() != changed.digest()
    assert base.digest().startswith("sha256:")


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("commit: " + "c" * 40, "commit: abc123", "artifacts[0].commit"),
        ("source: hub", "source: ftp", "artifacts[0].source"),
        ("size: 9", "size: -1", "files[0].size"),
        ("size: 9", "size: true", "files[0].size"),
        ("sha256: " + "a" * 64, "sha256: " + "A" * 64, "files[0].sha256"),
        ("path: b.json", "path: /etc/passwd", "files[1].path"),
        ("name: vllm", "name: vllm\n  branch: main", "engines[0].branch: unknown field"),
    ],
)
def test_invalid_fields_are_named(old, new, field):
    text = dumps_lockfile(replace(_lock(), lockfile_version=2))  # a node per field
    assert old in text
    with pytest.raises(InputError) as info:
        parse_lockfile(text.replace(old, new, 1), "x.lock")
    # The one schema error format: FILE:LINE: FIELD: MESSAGE.
    assert field in str(info.value) and re.match(r"x\.lock:\d+: ", str(info.value))


ROW_A = "a" * 64 + " 9 " + "1" * 40 + " a.safetensors"
ROW_B = "b" * 64 + " 2 - b.json"


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (ROW_A, ROW_A.replace(" 9 ", " -1 "), "expected 'SHA256 SIZE BLOB_ID|- PATH'"),
        (ROW_A, ROW_A.replace(" 9 ", " 09 "), "expected 'SHA256 SIZE BLOB_ID|- PATH'"),
        (ROW_A, ROW_A.replace(" 9 ", " " + "9" * 5000 + " "), "expected 'SHA256"),
        (ROW_A, "A" * 64 + ROW_A[64:], "expected 'SHA256"),
        (ROW_A, ROW_A.replace(" a.safetensors", ""), "expected 'SHA256"),
        (ROW_A, ROW_A.replace(" a.safetensors", " a.safetensors "), "expected 'SHA256"),
        (ROW_B, ROW_B.replace("b.json", "/etc/passwd"), "not a safe relative path"),
        (ROW_B, ROW_B.replace("b.json", "x/../b.json"), "not a safe relative path"),
        (ROW_B, ROW_B.replace("b.json", '"b.json"'), "written as a JSON string"),
        (ROW_B, ROW_B.replace("b.json", '"\\u00e9'), "written as a JSON string"),
        (ROW_B, ROW_B.replace("b.json", "a.safetensors"), "duplicate path 'a.safetensors'"),
        (ROW_B, ROW_B.replace("b.json", "a.json"), "rows must be sorted by path"),
        (ROW_A, ROW_A + "\n", "expected 'SHA256"),  # an empty row inside the block
    ],
)
def test_a_bad_files_table_row_is_an_error_naming_its_line(old, new, problem):
    text = dumps_lockfile(_lock())
    assert text.count(old) == 2  # the drafter's and the target's table
    bad = text.replace(old, new, 1)
    with pytest.raises(InputError) as info:
        parse_lockfile(bad, "x.lock")
    message = str(info.value)
    line = int(re.match(r"x\.lock:(\d+): artifacts\[0\]\.files: ", message).group(1))
    assert problem in message
    named = bad.splitlines()[line - 1].strip()  # the line named is the row that was changed
    assert named == new.strip() or (new.endswith("\n") and named == "")


def test_paths_that_cannot_stand_plain_are_json_strings_and_round_trip():
    odd = ("a b ", "é.txt", '"q', "new\nline", "tab\tx", "#x", "- y")
    files = tuple(LockedFile(path, 1, "c" * 64) for path in odd)
    lock = Lockfile((Artifact("target", "local", None, None, None, files, name="t"),))
    text = dumps_lockfile(lock)
    table = text.split("files: |\n", 1)[1].split("  code_refs:", 1)[0]
    assert len(table.splitlines()) == len(odd)  # one line per file, the block stays literal
    assert '"a b "' in table and '"\\u00e9.txt"' in table and " #x\n" in table
    assert {f.path for f in parse_lockfile(text).artifact("target").files} == set(odd)


def test_versions_1_and_2_are_still_read_and_written():
    for version in (1, 2):
        old = replace(_lock(), lockfile_version=version)
        if version == 1:
            old = replace(old, artifacts=tuple(replace(a, provenance=None)
                                               for a in old.artifacts))
        text = dumps_lockfile(old)
        assert f"lockfile_version: {version}" in text and "- path: a.safetensors" in text
        parsed = parse_lockfile(text)
        assert parsed.lockfile_version == version and parsed.digest() == old.digest()
        assert parsed.artifact("target").file("a.safetensors").blob_id == "1" * 40


def test_a_table_read_back_has_the_digest_of_the_files_it_names():
    """The reader reuses a table's text for the digest only because it checked the text is
    exactly what the writer writes for those files: recomputing from the files agrees."""
    text = dumps_lockfile(_lock())
    parsed = parse_lockfile(text)
    assert parsed.digest() == _lock().digest()
    assert files_table(parsed.artifact("drafter").files) == yaml.safe_load(text)["artifacts"][
        1]["files"]


def test_duplicate_role_is_refused():
    text = dumps_lockfile(_lock()).replace("role: drafter", "role: target")
    with pytest.raises(InputError, match="more than once"):
        parse_lockfile(text)


def test_unreadable_lockfile_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read lockfile"):
        load_lockfile(tmp_path / "missing.lock")
    (tmp_path / "bin.lock").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError):
        load_lockfile(tmp_path / "bin.lock")


def test_example_qwen3_lockfile_is_valid_and_realistic():
    lock = load_lockfile(EXAMPLE)
    target, drafter = lock.artifact("target"), lock.artifact("drafter")
    assert (target.repo, drafter.repo) == ("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16")
    shards = [f for f in target.files if f.path.endswith(".safetensors")]
    assert len(shards) == 5 and 15e9 < sum(f.size for f in shards) < 18e9
    assert drafter.file("dflash.py") is not None
    assert lock.engines[0].name == "vllm" and len(lock.engines[0].commit) == 40
    assert dumps_lockfile(lock) == EXAMPLE.read_text()


def test_build_lock_refusal_is_an_outcome_not_an_exception(tmp_path):
    """An unsafe folder is refused (a result the CLI maps to exit 1); a clean one is locked."""
    from dflash_guard.outcome import Verdict
    from dflash_guard.pins.resolve import build_lock

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    clean = build_lock({"target": str(folder)})
    assert clean.outcome.verdict is Verdict.passed and clean.lock is not None
    (tmp_path / "secret").write_text("x")
    (folder / "escape.json").symlink_to(tmp_path / "secret")
    refused = build_lock({"target": str(folder)})
    assert refused.outcome.verdict is Verdict.refused and refused.lock is None
    assert "refusing to lock" in refused.outcome.reason and "escape.json" in refused.outcome.reason
