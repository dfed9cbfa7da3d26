"""Hostile lockfiles, folders and files (issue 15, items 4, 5, 8, 13, 14): each ends in one line
and exit 2, or in a finding (exit 1); never a hang, a crash or a file silently left out."""

from __future__ import annotations

import builtins
import errno
import os
from pathlib import Path

import pytest

from dflash_guard import schema
from dflash_guard.errors import InputError
from dflash_guard.pins import verify as verify_module
from dflash_guard.pins.folder import list_folder
from dflash_guard.trust.policy import parse_policy
from tests.support.hostile import deep_folder, one_line_error, remove_deep_folder, unblocking
from tests.support.pins import drafter_files, target_files, write_folder


def alias_bomb(head: str) -> str:
    """The billion-laughs document: nine levels of nine aliases, under 400 bytes."""
    lines = [head + "[&a [lol,lol,lol,lol,lol,lol,lol,lol,lol],"]
    previous = "a"
    for name in "bcdefgh":
        lines.append(f"  &{name} [" + ",".join([f"*{previous}"] * 9) + "],")
        previous = name
    lines.append("  [" + ",".join([f"*{previous}"] * 9) + "]]")
    return "\n".join(lines) + "\n"


@pytest.fixture
def locked(cli, tmp_path):
    """A lockfile of a local pair whose target has an empty file; (lock, target, drafter)."""
    target = write_folder(tmp_path / "target", {**target_files(), "empty.txt": b""})
    drafter = write_folder(tmp_path / "drafter", drafter_files())
    out = tmp_path / "dflash.lock"
    result = cli("lock", "--target", target, "--drafter", drafter, "-o", out)
    assert result.exit_code == 0, result.stderr
    return out, target, drafter






# --- item 4: anchors, aliases, size, unbounded values --------------------------------------------


def test_alias_bomb_in_a_lockfile_is_refused_before_it_expands(cli, tmp_path):
    bomb = alias_bomb("lockfile_version: 1\ntool_version: ")
    assert len(bomb.encode()) < 400
    path = tmp_path / "bomb.lock"
    path.write_text(bomb)
    message = one_line_error(cli("verify", "--lock", path))
    assert "anchors and aliases" in message
    assert len(message) < 300


def test_alias_bomb_in_a_policy_is_refused():
    with pytest.raises(InputError, match="anchors and aliases"):
        parse_policy(alias_bomb("policy_version: 1\nname: "), "bomb.yaml")


def test_a_single_alias_is_refused_too():
    with pytest.raises(InputError, match="anchors and aliases"):
        schema.read_document("a: &x 1\nb: *x\n", "doc.yaml")


def test_an_oversized_document_is_refused_before_parsing(monkeypatch):
    monkeypatch.setattr(schema, "MAX_DOCUMENT_CHARS", 1000)
    with pytest.raises(InputError, match="larger than 1,000 characters"):
        schema.read_document("a: " + "x" * 2000 + "\n", "big.yaml")


def test_an_unbounded_value_is_shortened_in_the_message(cli, tmp_path):
    path = tmp_path / "long.lock"
    path.write_text("lockfile_version: 1\ntool_version: [" + ", ".join(["lol"] * 20000) + "]\n")
    message = one_line_error(cli("verify", "--lock", path))
    assert "tool_version: expected str" in message and "more characters>" in message
    assert len(message) < 300


def test_a_long_unknown_key_is_shortened_in_the_message(cli, tmp_path):
    path = tmp_path / "key.lock"
    path.write_text("lockfile_version: 1\n? " + "k" * 50000 + "\n: 1\n")
    message = one_line_error(cli("verify", "--lock", path))
    assert "unknown field" in message and len(message) < 400


# --- item 8: duplicate keys ----------------------------------------------------------------------


def test_a_duplicate_key_in_a_lockfile_mapping_is_refused(cli, locked):
    lock_path = locked[0]
    text = lock_path.read_text()
    first = next(line for line in text.splitlines() if line.strip().startswith("name:"))
    forged = first.split(":")[0] + ": forged"
    lock_path.write_text(text.replace(first, f"{forged}\n{first}", 1))
    message = one_line_error(cli("verify", "--lock", lock_path, "--root", f"target={locked[1]}",
                                 "--root", f"drafter={locked[2]}"))
    assert "name: field given twice" in message


# --- item 13: values and shapes Python itself chokes on --------------------------------------


def test_a_5000_digit_integer_in_a_lockfile_is_an_input_error(cli, locked):
    lock_path = locked[0]
    text = lock_path.read_text()
    lock_path.write_text(text.replace("lockfile_version: 3", "lockfile_version: " + "9" * 5000))
    message = one_line_error(cli("verify", "--lock", lock_path))
    assert "lockfile_version: not a usable value" in message and len(message) < 300
    row = next(line for line in text.splitlines() if line.endswith(" - config.json"))
    sha256, size, rest = row.strip().split(" ", 2)
    lock_path.write_text(text.replace(row, f"    {sha256} {'9' * 5000} {rest}", 1))
    message = one_line_error(cli("verify", "--lock", lock_path))
    assert "expected 'SHA256 SIZE BLOB_ID|- PATH'" in message and len(message) < 300


def test_yaml_nested_thousands_deep_is_an_input_error(cli, tmp_path):
    path = tmp_path / "deep.lock"
    path.write_text("lockfile_version: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nested too deeply" in one_line_error(cli("verify", "--lock", path))


def test_building_a_value_nested_too_deep_is_an_input_error():
    """libyaml composes deep nesting without Python recursion; building the value recurses."""
    import yaml

    mark = yaml.Mark("deep.yaml", 0, 0, 0, None, None)
    node = yaml.SequenceNode("tag:yaml.org,2002:seq", [], mark, mark)
    for _ in range(5000):
        node = yaml.SequenceNode("tag:yaml.org,2002:seq", [node], mark, mark)
    document = schema.Document("", "deep.yaml")
    with pytest.raises(InputError, match="deep.yaml:1: a: nested too deeply"):
        document.construct(node, "a")


def test_a_lockfile_that_is_a_device_is_not_read(cli):
    assert "a device, not a regular file" in one_line_error(cli("verify", "--lock", "/dev/zero"))


def test_an_unreadable_file_is_one_line_in_lock_and_verify(cli, locked, tmp_path, monkeypatch):
    """Root reads any file, so EACCES is simulated on whichever open the hashing uses."""
    lock_path, target, drafter = locked
    denied = str(target / "model.safetensors")
    real_open, real_os_open = builtins.open, os.open

    def check(path) -> None:
        if not isinstance(path, int) and os.fspath(path) == denied:
            raise PermissionError(errno.EACCES, "Permission denied", denied)

    def patched_open(path, *args, **kwargs):
        check(path)
        return real_open(path, *args, **kwargs)

    def patched_os_open(path, *args, **kwargs):
        check(path)
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", patched_open)
    monkeypatch.setattr(os, "open", patched_os_open)
    verify = cli("verify", "--lock", lock_path, "--no-cache", "--root", f"target={target}",
                 "--root", f"drafter={drafter}")
    assert "Permission denied" in one_line_error(verify)
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "fresh-cache"))
    lock = cli("lock", "--target", target, "--drafter", drafter, "-o", tmp_path / "again.lock")
    assert "Permission denied" in one_line_error(lock)


# --- item 5: folders the walk cannot enter -------------------------------------------------------


@pytest.fixture
def deep_target(tmp_path):
    """A target folder with a file 2500 folders down (past PATH_MAX)."""
    target = write_folder(tmp_path / "deep-target", target_files())
    deep_folder(target / "sub", 2500)
    yield target
    remove_deep_folder(target / "sub")


def test_walk_reports_a_folder_past_path_max(deep_target):
    files, unsafe = list_folder(deep_target)
    assert "config.json" in files
    assert unsafe and all(u.path.startswith("sub/d/") for u in unsafe)
    assert any("PATH_MAX" in u.detail or "cannot be listed" in u.detail for u in unsafe)


def test_lock_and_scan_fail_closed_on_a_path_past_path_max(cli, deep_target, tmp_path):
    drafter = write_folder(tmp_path / "drafter", drafter_files())
    lock = cli("lock", "--target", deep_target, "--drafter", drafter, "-o", tmp_path / "x.lock")
    assert lock.exit_code == 1, lock.stderr
    assert "refus" in lock.stdout
    assert cli("scan", deep_target).exit_code == 1


@pytest.fixture
def unlistable(monkeypatch):
    """Simulate a mode-000 subfolder (tests run as root, who may list anything): listing any
    folder named `secret` fails with EACCES, whichever of os.scandir/os.listdir the walk uses."""

    def guard(real):
        def call(path=".", *args, **kwargs):
            if os.path.basename(os.fspath(path)) == "secret":
                raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "scandir", guard(os.scandir))
    monkeypatch.setattr(os, "listdir", guard(os.listdir))


def test_lock_refuses_a_folder_it_cannot_enter(cli, tmp_path, unlistable):
    target = write_folder(tmp_path / "target", {**target_files(), "secret/weights.bin": b"x"})
    drafter = write_folder(tmp_path / "drafter", drafter_files())
    lock = cli("lock", "--target", target, "--drafter", drafter, "-o", tmp_path / "x.lock")
    assert lock.exit_code == 1, lock.stderr
    assert "secret" in lock.stdout and "cannot be listed" in lock.stdout.replace("\n", "")


def test_verify_and_scan_report_a_folder_they_cannot_enter(cli, locked, unlistable):
    lock_path, target, drafter = locked
    write_folder(target, {"secret/weights.bin": b"added after the lock"})
    verify = cli("verify", "--lock", lock_path, "--root", f"target={target}",
                 "--root", f"drafter={drafter}", "--format", "json")
    assert verify.exit_code == 1, verify.stderr
    assert '"path": "secret"' in verify.stdout
    scan = cli("scan", target, "--format", "json")
    assert scan.exit_code == 1 and "secret" in scan.stdout


def test_verify_fails_closed_on_a_folder_past_path_max(cli, locked):
    lock_path, target, drafter = locked
    deep_folder(target / "sub", 2500)
    try:
        verify = cli("verify", "--lock", lock_path, "--root", f"target={target}",
                     "--root", f"drafter={drafter}", "--format", "json")
    finally:
        remove_deep_folder(target / "sub")
    assert verify.exit_code == 1, verify.stderr
    assert '"path": "sub/d/' in verify.stdout


# --- item 14: FIFOs where files were ---------------------------------------------------------


def test_a_locked_file_swapped_for_a_fifo_during_verify_is_refused(cli, locked, monkeypatch):
    lock_path, target, drafter = locked
    empty = target / "empty.txt"

    def list_then_swap(root, boundary=None):
        listing = list_folder(root, boundary)
        if Path(root) == target:  # the swap lands between the listing and the hashing
            empty.unlink()
            os.mkfifo(empty)
        return listing

    monkeypatch.setattr(verify_module, "list_folder", list_then_swap)
    with unblocking(empty):
        result = cli("verify", "--lock", lock_path, "--no-cache", "--root", f"target={target}",
                     "--root", f"drafter={drafter}")
    assert "a FIFO, not a regular file" in one_line_error(result)


def test_a_stat_cache_that_is_a_fifo_is_ignored(cli, locked, tmp_path, monkeypatch):
    lock_path, target, drafter = locked
    cache_dir = tmp_path / "fifo-cache"
    cache_dir.mkdir()
    os.mkfifo(cache_dir / "statcache.json")
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(cache_dir))
    with unblocking(cache_dir / "statcache.json"):
        result = cli("verify", "--lock", lock_path, "--root", f"target={target}",
                     "--root", f"drafter={drafter}", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert '"cache_hits": 0' in result.stdout
    assert (cache_dir / "statcache.json").is_fifo()  # not replaced by a regular file either
