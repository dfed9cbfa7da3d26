"""GGUF validated as llama.cpp's loader validates it: tensor data aligned to general.alignment,
each tensor at exactly the running offset (ordered, disjoint, no gap) and inside the file;
dimensions bounded by the file before anything is sized by them; the declared block count,
embedding width and vocabulary against the tensors. Real benign files: the vocabulary GGUFs
of the pinned llama.cpp tree."""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.scan.weights.gguf import scan_gguf_file
from dflash_guard.severity import Severity
from tests.support.llamacpp import _script


def _write(path: Path, tensors: dict[str, tuple[int, ...]], **keys: int) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in keys.items():
        writer.add_uint32(f"llama.{key}", value)
    for name, shape in tensors.items():
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _model(path: Path, **keys: int) -> Path:
    keys = {"block_count": 2, "embedding_length": 8, **keys}
    return _write(path, {"token_embd.weight": (16, 8), "blk.0.attn_norm.weight": (8,),
                         "blk.1.attn_norm.weight": (8,)}, **keys)


def _offset_fields(data: bytes) -> list[int]:
    """Byte positions of each tensor info's offset field (walks the header the writer wrote)."""
    reader = gguf.GGUFReader(_tmp_bytes(data))
    return [int(t.field.offset + sum(p.nbytes for p in t.field.parts[:-1])) for t in
            reader.tensors]


_SCRATCH: list[Path] = []


def _tmp_bytes(data: bytes) -> Path:
    path = _SCRATCH[0] / "scratch.gguf"
    path.write_bytes(data)
    return path


@pytest.fixture(autouse=True)
def _scratch(tmp_path: Path):
    _SCRATCH[:] = [tmp_path]
    yield


def _with_offset(tmp_path: Path, index: int, offset: int) -> Path:
    data = bytearray(_model(tmp_path / "good.gguf").read_bytes())
    at = _offset_fields(bytes(data))[index]
    data[at:at + 8] = struct.pack("<Q", offset)
    out = tmp_path / "bad.gguf"
    out.write_bytes(bytes(data))
    return out


def _loud(path: Path) -> list[str]:
    return [f.message for f in scan_gguf_file(path, path.name) if f.severity >= Severity.high]


def test_a_well_formed_model_is_clean(tmp_path: Path) -> None:
    assert scan_gguf_file(_model(tmp_path / "m.gguf"), "m.gguf") == []


@pytest.mark.parametrize(("offset", "words"), [
    (512 + 4, "not aligned"),   # tensor 1 (blk.0) moved off the 32-byte grid
    (0, "overlaps"),            # on top of token_embd
    (512 + 64, "gap"),          # a hole llama.cpp refuses
])
def test_tensor_offsets_as_llamacpp_requires(tmp_path: Path, offset: int, words: str) -> None:
    loud = _loud(_with_offset(tmp_path, 1, offset))
    assert any(words in m for m in loud), loud


def test_a_tensor_past_the_end(tmp_path: Path) -> None:
    loud = _loud(_with_offset(tmp_path, 2, 1 << 20))
    assert any("past the file" in m for m in loud), loud


def test_dimensions_bounded_before_anything_is_sized(tmp_path: Path) -> None:
    data = bytearray(_model(tmp_path / "good.gguf").read_bytes())
    at = _offset_fields(bytes(data))[0]  # token_embd: dims [8, 16] sit before type and offset
    data[at - 4 - 16:at - 4 - 8] = struct.pack("<Q", 1 << 40)
    (tmp_path / "huge.gguf").write_bytes(bytes(data))
    findings = scan_gguf_file(tmp_path / "huge.gguf", "huge.gguf")
    assert [f.rule_id for f in findings] == ["DG-GGUF-MALFORMED"], findings
    assert "elements" in findings[0].message


@pytest.mark.parametrize(("keys", "words"), [
    ({"block_count": 3}, "block_count is 3"),
    ({"block_count": 1}, "block_count is 1"),
    ({"embedding_length": 16}, "embedding_length is 16"),
])
def test_declared_sizes_against_the_tensors(tmp_path: Path, keys: dict, words: str) -> None:
    loud = _loud(_model(tmp_path / "m.gguf", **keys))
    assert any(words in m for m in loud), loud


def test_a_key_missing_where_the_tensors_need_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.gguf", {"token_embd.weight": (16, 8),
                                        "blk.0.attn_norm.weight": (8,)})
    loud = _loud(path)
    assert any("block_count is missing" in m for m in loud), loud
    assert any("embedding_length is missing" in m for m in loud), loud


def _vocab_files() -> list[Path]:
    tree = Path(_script("tree", timeout=600))
    files = sorted((tree / "models").glob("ggml-vocab-*.gguf"), key=lambda p: p.stat().st_size)
    assert len(files) >= 15
    return files


def _clean(files: list[Path]) -> None:
    report = scan_paths(files)
    assert [f for f in report.findings if f.severity >= Severity.medium] == []
    assert report.files_scanned == len(files) and not report.pickle_files


def test_every_vocabulary_gguf_of_the_pinned_llamacpp_tree_is_clean() -> None:
    """All 19, the two vocabularies DFlash targets ship with among them (Qwen's 151,936 and
    Llama 3's 128,256 ids): the bounded reader reads each header in well under a second."""
    files = _vocab_files()
    assert {"ggml-vocab-qwen2.gguf", "ggml-vocab-llama-bpe.gguf"} <= {f.name for f in files}
    _clean(files)


def test_per_layer_head_counts_are_not_taken_for_missing(tmp_path: Path) -> None:
    """llama.cpp reads `head_count` as one number or one per layer (`get_key_or_arr`)."""
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 1)
    writer.add_uint32("llama.embedding_length", 8)
    writer.add_array("llama.attention.head_count", [2])
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((8, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert _loud(path) == []
