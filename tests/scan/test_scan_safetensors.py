"""The safetensors detector: header-only checks and sharded indexes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.scan.weights.safetensors import check_index, check_safetensors
from dflash_guard.severity import Severity
from tests.support.scan_builders import raw_safetensors, write_json, write_safetensors

GOOD_HEADER = '{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}'


def _rules(findings):
    return {f.rule_id for f in findings}


def test_library_written_file_is_clean_and_counted(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", {"a": (4, 8), "b": (8,)})
    findings, header = check_safetensors(path, "m.safetensors")
    assert findings == []
    assert header is not None and header.param_count == 40


def test_duplicate_json_key(tmp_path: Path) -> None:
    header = (
        '{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},'
        '"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    )
    path = tmp_path / "dup.safetensors"
    path.write_bytes(raw_safetensors(header, b"\x00" * 16))
    assert "DG-ST-DUPLICATE-KEY" in _rules(check_safetensors(path, "dup")[0])


def test_length_larger_than_file(tmp_path: Path) -> None:
    path = tmp_path / "long.safetensors"
    path.write_bytes(raw_safetensors(GOOD_HEADER, b"\x00" * 16, length=10**9))
    assert "DG-ST-LENGTH" in _rules(check_safetensors(path, "long")[0])


def test_zip_appended_after_the_data_is_a_polyglot(tmp_path: Path) -> None:
    path = tmp_path / "poly.safetensors"
    path.write_bytes(raw_safetensors(GOOD_HEADER, b"\x00" * 16) + b"PK\x03\x04" + b"\x00" * 40)
    rules = _rules(check_safetensors(path, "poly")[0])
    assert {"DG-ST-TRAILING", "DG-ST-POLYGLOT"} <= rules


def test_pickle_signature_in_the_header(tmp_path: Path) -> None:
    header = GOOD_HEADER.encode()[:-1] + b',"__metadata__":{"x":"\x80\x04"}}'
    path = tmp_path / "pickle.safetensors"
    path.write_bytes(raw_safetensors(header, b"\x00" * 16))
    assert "DG-ST-POLYGLOT" in _rules(check_safetensors(path, "p")[0])


def test_dtype_shape_vs_byte_span(tmp_path: Path) -> None:
    header = '{"w":{"dtype":"F32","shape":[3,3],"data_offsets":[0,16]}}'
    path = tmp_path / "span.safetensors"
    path.write_bytes(raw_safetensors(header, b"\x00" * 16))
    findings = check_safetensors(path, "span")[0]
    assert any(f.rule_id == "DG-ST-TENSOR" and "36 bytes" in f.message for f in findings)


def test_truncated_and_not_json(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x05\x00")
    assert "DG-ST-TRUNCATED" in _rules(check_safetensors(short, "s")[0])
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(raw_safetensors("{not json", b""))
    assert "DG-ST-HEADER" in _rules(check_safetensors(garbage, "g")[0])


def test_big_sparse_file_is_checked_from_its_header(tmp_path: Path) -> None:
    """A 2 GiB (sparse) file scans without reading its data; the parameter count comes out."""
    rows = 2**29 // 4  # 2**29 float32 values = 2 GiB
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [4, rows], "data_offsets": [0, 4 * rows * 4]}}
    )
    path = tmp_path / "big.safetensors"
    with path.open("wb") as handle:
        handle.write(raw_safetensors(header))
        handle.truncate(8 + len(header) + 4 * rows * 4)
    findings, header_read = check_safetensors(path, "big")
    assert findings == []
    assert header_read.param_count == 4 * rows
    os.remove(path)


def _sharded(folder: Path) -> Path:
    write_safetensors(folder / "model-00001-of-00002.safetensors", {"a": (2,), "b": (2,)})
    write_safetensors(folder / "model-00002-of-00002.safetensors", {"c": (2,)})
    return write_json(
        folder / "model.safetensors.index.json",
        {
            "metadata": {},
            "weight_map": {
                "a": "model-00001-of-00002.safetensors",
                "b": "model-00001-of-00002.safetensors",
                "c": "model-00002-of-00002.safetensors",
            },
        },
    )


def test_good_sharded_checkpoint(tmp_path: Path) -> None:
    index = _sharded(tmp_path)
    assert check_index(index, "index") == []
    assert scan_paths([tmp_path]).param_count == 6


def test_index_missing_shard_and_path_escape(tmp_path: Path) -> None:
    index = _sharded(tmp_path)
    value = json.loads(index.read_text())
    value["weight_map"]["c"] = "../../etc/model.safetensors"
    value["weight_map"]["d"] = "model-00003-of-00003.safetensors"
    index.write_text(json.dumps(value))
    rules = _rules(check_index(index, "index"))
    assert {"DG-ST-INDEX-PATH", "DG-ST-INDEX-MISSING"} <= rules


def test_index_tensor_in_two_shards_or_absent(tmp_path: Path) -> None:
    index = _sharded(tmp_path)
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"c": (2,), "a": (2,)})
    value = json.loads(index.read_text())
    value["weight_map"]["zzz"] = "model-00002-of-00002.safetensors"
    index.write_text(json.dumps(value))
    messages = [f.message for f in check_index(index, "index") if f.severity >= Severity.high]
    assert any("two shards" in m for m in messages)
    assert any("'zzz'" in m and "lacks it" in m for m in messages)


def test_index_duplicate_key(tmp_path: Path) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}')
    assert "DG-ST-INDEX" in _rules(check_index(index, "index"))


def _with_metadata(path: Path, metadata: dict[str, str]) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"w": np.zeros((2, 2), dtype=np.float32)}, str(path), metadata=metadata)
    return path


_PICKLE_GADGET = b"\x80\x04\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93."


@pytest.mark.parametrize(
    "value",
    [
        _PICKLE_GADGET.decode("latin-1"),  # pickle bytes spelled as code points
        base64.b64encode(_PICKLE_GADGET).decode(),
        base64.b64encode(b"cos\nsystem\n(S'id'\ntR.").decode(),  # protocol 0: no signature
        "cos\nsystem\n(S'id'\ntR.",
        "!!python/object/apply:os.system ['id']",
        base64.b64encode(b"config: !!python/name:os.system").decode(),
    ],
)
def test_metadata_value_carrying_a_serialized_payload(tmp_path: Path, value: str) -> None:
    path = _with_metadata(tmp_path / "m.safetensors", {"format": "pt", "extra": value})
    findings, _ = check_safetensors(path, "m.safetensors")
    hits = [f for f in findings if f.rule_id == "DG-ST-METADATA-PAYLOAD"]
    assert hits and hits[0].severity is Severity.high and hits[0].member == "__metadata__.extra"


def test_ordinary_metadata_and_the_word_gguf_are_quiet(tmp_path: Path) -> None:
    metadata = {
        "format": "pt",
        "note": "converted from GGUF; see the model card\nfor details",
        "sha256": hashlib.sha256(b"weights").hexdigest(),
        "config": base64.b64encode(json.dumps({"hidden_size": 64}).encode()).decode(),
        "yaml": "base_model: org/model\nlicense: apache-2.0\n",
    }
    path = _with_metadata(tmp_path / "m.safetensors", metadata)
    assert check_safetensors(path, "m.safetensors")[0] == []


def test_pytorch_bin_index_paths_are_checked(tmp_path: Path) -> None:
    """Not only safetensors' index: `pytorch_model.bin.index.json` names files a loader opens."""
    (tmp_path / "pytorch_model-00001-of-00001.bin").write_bytes(b"")
    write_json(
        tmp_path / "pytorch_model.bin.index.json",
        {"weight_map": {"a": "pytorch_model-00001-of-00001.bin", "b": "../../outside.bin",
                        "c": "C:/models/x.bin"}},
    )
    findings = [
        f for f in scan_paths([tmp_path]).findings if f.file == "pytorch_model.bin.index.json"
    ]
    paths = sorted(f.message for f in findings if f.rule_id == "DG-ST-INDEX-PATH")
    assert len(paths) == 2 and "outside.bin" in paths[0] and "C:" in paths[1]


def test_benign_pytorch_bin_index_and_other_index_files_are_quiet(tmp_path: Path) -> None:
    import torch

    torch.save({"a": torch.zeros(2)}, tmp_path / "pytorch_model-00001-of-00001.bin")
    write_json(
        tmp_path / "pytorch_model.bin.index.json",
        {"metadata": {"total_size": 8}, "weight_map": {"a": "pytorch_model-00001-of-00001.bin"}},
    )
    write_json(tmp_path / "search.index.json", {"entries": []})  # not a weight index
    report = scan_paths([tmp_path])
    assert [f for f in report.findings if f.severity >= Severity.medium] == []


def test_oversized_metadata_is_a_limit_finding(tmp_path: Path, monkeypatch) -> None:
    from dflash_guard.scan.pickle import payloads

    monkeypatch.setattr(payloads, "MAX_CHECKED", 100)
    path = _with_metadata(tmp_path / "m.safetensors", {"notes": "x" * 200})
    assert "DG-UNSCANNABLE" in _rules(check_safetensors(path, "m.safetensors")[0])


def test_duplicate_keys_are_found_in_linear_time() -> None:
    """`keys.count` per key was quadratic on a hostile header (no timing asserted here)."""
    from dflash_guard.fileio import DuplicateKeyError, loads_json

    document = "{" + ",".join(f'"k{i}":1' for i in range(50_000)) + ',"k0":2}'
    with pytest.raises(DuplicateKeyError, match="'k0'"):
        loads_json(document, strict=True)
