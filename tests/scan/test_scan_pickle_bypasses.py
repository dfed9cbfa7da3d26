"""Issue 14's pickle classes: files loaders open that a first-byte sniff missed, zips two readers
read differently, and the harmless pickles that must not be high findings. Each attack has a
benign twin that stays below medium."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from dflash_guard.scan import scan_paths
from dflash_guard.scan.pickle import containers, stream
from dflash_guard.scan.pickle.scan import scan_pickle_file
from dflash_guard.severity import Severity
from tests.support.scan_builders import findings_at_least, gadget_pickle

BENIGN = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."  # {"a": 1}


def _critical(findings, name: str = "os.system") -> bool:
    return any(f.severity is Severity.critical and name in f.message for f in findings)


def _quiet(findings) -> bool:
    return findings_at_least(findings, Severity.medium) == []


def _scan(tmp_path: Path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return scan_pickle_file(path, name)


# -- streams the loader reads that a PROTO sniff did not --------------------------------------
def _frame_first(body: bytes) -> bytes:
    return b"\x95" + struct.pack("<Q", len(body)) + body


@pytest.mark.parametrize(
    "data",
    [
        _frame_first(gadget_pickle("os", "system", protocol=4)[2:]),  # FRAME, no PROTO
        gadget_pickle("os", "system", protocol=4)[2:],  # protocol 4 body without PROTO
        b"I0x10\n0" + gadget_pickle("os", "system", protocol=0),  # INT as int(x, 0) reads it
        b"S'\xe9t\xe9'\n0" + gadget_pickle("os", "system", protocol=0),  # non-ASCII STRING
        BENIGN + gadget_pickle("os", "system", protocol=0),  # stacked, second without PROTO
        BENIGN + gadget_pickle("os", "system", protocol=4)[2:],
    ],
    ids=["frame-first", "no-proto", "int-base0", "non-ascii-string", "stacked-p0", "stacked-p4"],
)
def test_streams_a_loader_reads_are_walked_whatever_their_first_byte(
    tmp_path: Path, data: bytes
) -> None:
    assert _critical(_scan(tmp_path, "model.bin", data))


def test_benign_twins_of_the_unusual_streams(tmp_path: Path) -> None:
    assert _quiet(_scan(tmp_path, "a.bin", _frame_first(BENIGN[2:])))
    assert _quiet(_scan(tmp_path, "b.bin", b"S'\xe9t\xe9'\n."))
    assert _quiet(_scan(tmp_path, "c.bin", BENIGN + BENIGN))
    assert _quiet(_scan(tmp_path, "d.bin", BENIGN + b"trailing text, not a pickle\n"))


def test_a_pickle_under_any_name_is_found_by_content(tmp_path: Path) -> None:
    """torch.load and pickle.load ignore the name: protocol 0 has no signature to sniff."""
    (tmp_path / "weights.dat").write_bytes(gadget_pickle("os", "system", protocol=0))
    popen = gadget_pickle("os", "popen", protocol=4)[2:]
    (tmp_path / "model.onnx").write_bytes(_frame_first(popen))
    (tmp_path / "model.msgpack").write_bytes(b"\x82\xa1a\x01\xa1b\x02")  # data, not a pickle
    findings = scan_paths([tmp_path]).findings
    assert {f.file for f in findings if f.severity is Severity.critical} == {
        "weights.dat",
        "model.onnx",
    }
    # a msgpack map parsed whole by msgpack (no extension type): data (scan/weights/flax_msgpack.py)
    assert [(f.rule_id, f.severity) for f in findings if f.file == "model.msgpack"] == []


# -- containers loaders open before unpickling --------------------------------------------------
def _tar(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_legacy_torch_tar_members_are_unpickled_so_scanned(tmp_path: Path) -> None:
    evil = _tar({"storages": b"\x80\x02K\x00.", "tensors": b"\x80\x02K\x00.",
                 "pickle": gadget_pickle("os", "system", protocol=2)})
    findings = _scan(tmp_path, "old.pt", evil)
    assert any(f.member == "pickle" and _critical([f]) for f in findings)
    benign = _tar({"storages": b"\x80\x02K\x00.", "tensors": b"\x80\x02K\x00.", "pickle": BENIGN})
    assert _quiet(_scan(tmp_path, "old_ok.pt", benign))


_COMPRESSORS = {
    "zlib": zlib.compress,
    "gzip": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
    "lzma": lambda data: lzma.compress(data, format=lzma.FORMAT_ALONE),
}


@pytest.mark.parametrize("kind", sorted(_COMPRESSORS))
def test_compressed_joblib_is_decompressed_and_scanned(tmp_path: Path, kind: str) -> None:
    compress = _COMPRESSORS[kind]
    findings = _scan(tmp_path, "model.joblib", compress(gadget_pickle("os", "system", protocol=2)))
    assert _critical(findings) and any(f.member == kind for f in findings)
    assert _quiet(_scan(tmp_path, "ok.joblib", compress(BENIGN)))


def test_decompression_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(containers, "MAX_BYTES", 1000)
    findings = _scan(tmp_path, "bomb.joblib", zlib.compress(BENIGN + b"\0" * 100_000))
    assert [f.rule_id for f in findings if f.detector == "pickle"] == ["DG-UNSCANNABLE"]


# -- zips two readers read differently ---------------------------------------------------------
def _torch_zip(state: dict) -> bytes:
    out = io.BytesIO()
    torch.save(state, out)
    return out.getvalue()


def _rewrite(source: bytes, extra: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(source)) as old, zipfile.ZipFile(out, "w") as new:
        for info in old.infolist():
            new.writestr(info, old.read(info))
        for name, data in extra.items():
            new.writestr(name, data)
    return out.getvalue()


def test_torch_reads_data_pkl_ignoring_case_so_every_pkl_spelling_is_scanned(
    tmp_path: Path,
) -> None:
    clean = _torch_zip({"w": torch.zeros(2)})
    prefix = zipfile.ZipFile(io.BytesIO(clean)).namelist()[0].split("/")[0]
    evil = _rewrite(clean, {f"{prefix}/DATA.PKL": gadget_pickle("os", "system", protocol=2)})
    assert _critical(_scan(tmp_path, "m.pt", evil))
    assert _quiet(_scan(tmp_path, "ok.pt", clean))


def test_local_header_name_differing_from_the_central_one(tmp_path: Path) -> None:
    data = _rewrite(_torch_zip({"w": torch.zeros(2)}), {"extra.pkl": gadget_pickle("os", "system")})
    local = data.index(b"extra.pkl")  # the local header's copy comes before the central one
    patched = data[:local] + b"extra.pkX" + data[local + 9 :]
    findings = _scan(tmp_path, "m.pt", patched)
    polyglot = [f.message for f in findings if f.rule_id == "DG-ZIP-POLYGLOT"]
    assert any("local header names it 'extra.pkX'" in m for m in polyglot)
    assert _critical(findings)  # the content is still scanned, as torch's reader reads it


def test_two_archives_back_to_back(tmp_path: Path) -> None:
    """zipfile and torch read the last end record; a forward-scanning reader reads the first."""
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("archive/data.pkl", gadget_pickle("os", "system", protocol=2))
    findings = _scan(tmp_path, "m.pt", evil.getvalue() + _torch_zip({"w": torch.zeros(2)}))
    polyglot = [f.message for f in findings if f.rule_id == "DG-ZIP-POLYGLOT"]
    assert any("end-of-central-directory" in m for m in polyglot)


def test_duplicate_member_names(tmp_path: Path) -> None:
    out = io.BytesIO()
    with pytest.warns(UserWarning), zipfile.ZipFile(out, "w") as archive:
        archive.writestr("a.pkl", BENIGN)
        archive.writestr("a.pkl", BENIGN)
    findings = _scan(tmp_path, "dup.zip", out.getvalue())
    assert any("two members" in f.message for f in findings if f.rule_id == "DG-ZIP-POLYGLOT")


def test_pickle_with_a_zip_appended(tmp_path: Path) -> None:
    """torch.load reads the pickle at byte 0; zipfile-based loaders read the zip at the end."""
    tail = io.BytesIO()
    with zipfile.ZipFile(tail, "w") as archive:
        archive.writestr("payload.pkl", gadget_pickle("os", "system", protocol=2))
    findings = _scan(tmp_path, "m.bin", BENIGN + tail.getvalue())
    assert "DG-ZIP-POLYGLOT" in {f.rule_id for f in findings} and _critical(findings)


def test_real_torch_checkpoints_have_no_zip_disagreement(tmp_path: Path) -> None:
    big = {f"layer{i}.weight": torch.randn(64, 64) for i in range(8)}
    assert _quiet(_scan(tmp_path, "big.pt", _torch_zip(big)))


# -- false alarms: harmless pickles are the policy's call, not a high finding -------------------
def test_quantized_state_dict_is_only_a_low_note(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="deprecated"):
        q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
        qc = torch.quantize_per_channel(
            torch.randn(2, 4), torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), 0, torch.quint8
        )
    state = {"q": q, "qc": qc, "i8": torch.zeros(3, dtype=torch.int8)}
    findings = _scan(tmp_path, "int8.bin", _torch_zip(state))
    assert _quiet(findings) and "DG-PICKLE-PRESENT" in {f.rule_id for f in findings}


def _training_args_pickle(extra_global: tuple[str, str] | None = None) -> bytes:
    """What `torch.save(TrainingArguments(...))` pickles: NEWOBJ of the class, BUILD with its
    fields, enum members rebuilt by REDUCE (written by hand: accelerate is not installed)."""
    def glob(module: str, name: str) -> bytes:
        return f"c{module}\n{name}\n".encode()

    def text(value: str) -> bytes:
        return b"X" + struct.pack("<I", len(value)) + value.encode()

    enum = glob("transformers.trainer_utils", "IntervalStrategy") + text("steps") + b"\x85R"
    fields = b"}(" + text("output_dir") + text("out") + text("eval_strategy") + enum
    if extra_global:
        fields += text("x") + glob(*extra_global) + text("id") + b"\x85R"
    return (
        b"\x80\x02" + glob("transformers.training_args", "TrainingArguments") + b")\x81"
        + fields + b"ub."
    )


def test_training_args_bin_is_a_low_class_global_for_the_policy(tmp_path: Path) -> None:
    findings = _scan(tmp_path, "training_args.bin", _training_args_pickle())
    assert _quiet(findings)
    assert {"DG-PICKLE-CLASS-GLOBAL", "DG-PICKLE-PRESENT"} <= {f.rule_id for f in findings}
    evil = _scan(tmp_path, "evil_args.bin", _training_args_pickle(("os", "system")))
    assert _critical(evil)


def test_numpy_format_3_arrays(tmp_path: Path) -> None:
    plain = io.BytesIO()
    np.lib.format.write_array(plain, np.arange(6), version=(3, 0))
    assert _quiet(_scan(tmp_path, "v3.npy", plain.getvalue()))
    objects = io.BytesIO()
    np.lib.format.write_array(objects, np.array([None], dtype=object), version=(3, 0))
    header_end = objects.getvalue().index(b"\n") + 1
    evil = objects.getvalue()[:header_end] + gadget_pickle("os", "system", protocol=2)
    assert _critical(_scan(tmp_path, "v3_evil.npy", evil))


# -- limits: hitting one is a finding ---------------------------------------------------------
def test_a_walk_past_its_time_limit_is_unscannable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "MAX_SECONDS", -1.0)
    monkeypatch.setattr(stream, "_CHECK_EVERY", 1)
    findings = _scan(tmp_path, "slow.pkl", BENIGN)
    assert "DG-UNSCANNABLE" in {f.rule_id for f in findings}


def test_compressed_or_tarred_pickles_under_other_names(tmp_path: Path) -> None:
    """joblib.load and torch.load open any name: a zlib stream or a tar named `.dat` is read."""
    (tmp_path / "state.dat").write_bytes(zlib.compress(gadget_pickle("os", "system", protocol=2)))
    (tmp_path / "old.ckpt2").write_bytes(_tar({"pickle": gadget_pickle("os", "popen", protocol=2)}))
    (tmp_path / "images.tar").write_bytes(_tar({"a.png": b"\x89PNG\r\n", "notes": b"hello"}))
    (tmp_path / "blob.dat").write_bytes(zlib.compress(b"just some compressed text"))
    findings = scan_paths([tmp_path]).findings
    assert {f.file for f in findings if f.severity is Severity.critical} == {
        "state.dat",
        "old.ckpt2",
    }
    # archives and compressed streams are not allowlisted: possible pickles, never critical
    assert {(f.file, f.rule_id) for f in findings
            if f.file in ("images.tar", "blob.dat") and f.severity >= Severity.medium} == {
        ("images.tar", "DG-FORMAT-UNKNOWN"), ("blob.dat", "DG-FORMAT-UNKNOWN")}


def test_overlapping_members(tmp_path: Path) -> None:
    """Two central entries over the same bytes: a reader that walks local headers sees one."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("a.pkl", BENIGN)
        archive.writestr("b.pkl", BENIGN)
    data = bytearray(out.getvalue())
    central_b = data.index(b"PK\x01\x02", data.index(b"PK\x01\x02") + 4)
    data[central_b + 42 : central_b + 46] = struct.pack("<I", 0)  # b.pkl now points at a.pkl
    findings = _scan(tmp_path, "overlap.zip", bytes(data))
    assert any("overlap" in f.message for f in findings if f.rule_id == "DG-ZIP-POLYGLOT")


def test_lz4_without_the_package_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(containers, "lz4_available", lambda: False)
    findings = _scan(tmp_path, "model.joblib", b"\x04\x22\x4d\x18" + b"\0" * 32)
    assert [f.rule_id for f in findings if f.detector == "pickle"] == ["DG-UNSCANNABLE"]
