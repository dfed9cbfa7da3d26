"""The one GGUF reader (`kernels_ref.gguf_reader`) held to gguf-py's `GGUFReader` field by field:
every key in order, its type, item type, count, byte range and value; every tensor's name,
extents, GGML type, data offset and size; the alignment and the data section's start. On the
pinned llama.cpp tree's vocabulary GGUFs (real files, from the converter) and on GGUFs written
here with gguf-py's writer (every value type, arrays of each, tensors of several GGML types,
a custom alignment, big-endian). Then the hostile cases: what llama.cpp's reader refuses is
refused, and the 3,000,000-token GGUF of attack N24 is walked without materialising it."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_guard.lossless.gguf_vocab import tokenizer_mismatch
from dflash_guard.scan.weights.gguf import scan_gguf_file
from dflash_guard.severity import Severity
from kernels_ref.gguf_reader import ARRAY, GGUFError, GGUFLimit, read_gguf
from tests.support.gguf_py import GGUFPyReader
from tests.support.hostile import n24_gguf
from tests.support.llamacpp import source_tree
from tests.support.scan_builders import write_gguf, write_vocab_gguf
from tests.support.trust import REPO

SYNTHETIC = 3  # gguf-py's reader lists GGUF.version, GGUF.tensor_count, GGUF.kv_count first


def assert_same_as_gguf_py(path: Path) -> int:
    """Compare every field and tensor of `path` as both readers see it; the fields compared."""
    theirs = GGUFPyReader(path)
    with path.open("rb") as handle, read_gguf(handle) as ours:
        fields = list(theirs.fields.values())[SYNTHETIC:]
        assert list(ours.fields) == [f.name for f in fields]
        for field in fields:
            mine = ours.fields[field.name]
            head = 3 if field.types[0] != gguf.GGUFValueType.ARRAY else 5  # parts before data
            assert mine.type == field.types[0]
            assert mine.item_type == (field.types[-1] if mine.type == ARRAY else None)
            assert mine.start == field.offset + sum(p.nbytes for p in field.parts[:head])
            assert mine.end == field.offset + sum(p.nbytes for p in field.parts)
            if mine.type == ARRAY:
                assert mine.count == len(field.data)
                assert ours.array(field.name) == field.contents()
            else:
                assert ours.value(field.name) == field.contents()
        assert len(ours.tensors) == len(theirs.tensors)
        for mine_t, tensor in zip(ours.tensors, theirs.tensors, strict=True):
            assert mine_t.name == tensor.name
            assert list(mine_t.dims) == [int(d) for d in tensor.shape]
            assert mine_t.ggml_type == int(tensor.tensor_type)
            assert mine_t.elements == tensor.n_elements
            assert mine_t.nbytes == tensor.n_bytes
            assert ours.data_start + mine_t.offset == tensor.data_offset
        if theirs.tensors:
            assert ours.alignment == theirs.alignment
            assert ours.data_start == theirs.data_offset
        return len(fields)


def _vocab_files() -> list[Path]:
    files = sorted((source_tree() / "models").glob("ggml-vocab-*.gguf"))
    assert len(files) == 19
    return files


VOCABS = [  # the 19 of the pinned tree (checked against it below)
    "ggml-vocab-aquila.gguf", "ggml-vocab-baichuan.gguf", "ggml-vocab-bert-bge.gguf",
    "ggml-vocab-command-r.gguf", "ggml-vocab-deepseek-coder.gguf",
    "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-falcon.gguf", "ggml-vocab-gemma-4.gguf",
    "ggml-vocab-gpt-2.gguf", "ggml-vocab-gpt-neox.gguf", "ggml-vocab-llama-bpe.gguf",
    "ggml-vocab-llama-spm.gguf", "ggml-vocab-mpt.gguf", "ggml-vocab-nomic-bert-moe.gguf",
    "ggml-vocab-phi-3.gguf", "ggml-vocab-qwen2.gguf", "ggml-vocab-qwen35.gguf",
    "ggml-vocab-refact.gguf", "ggml-vocab-starcoder.gguf"]


def test_the_list_is_the_trees_vocabulary_ggufs() -> None:
    assert [path.name for path in _vocab_files()] == VOCABS


@pytest.mark.slow
@pytest.mark.timeout(900)  # gguf-py's reader builds a numpy view per item: minutes in all
@pytest.mark.parametrize("name", VOCABS)
def test_each_vocabulary_gguf_of_the_pinned_tree_reads_as_gguf_py_reads_it(name: str) -> None:
    path = source_tree() / "models" / name
    assert assert_same_as_gguf_py(path) >= 10
    assert scan_gguf_file(path, name) == []


def _every_value_type(writer: gguf.GGUFWriter) -> None:
    writer.add_uint8("t.u8", 200)
    writer.add_int8("t.i8", -100)
    writer.add_uint16("t.u16", 60000)
    writer.add_int16("t.i16", -30000)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -2_000_000_000)
    writer.add_float32("t.f32", 0.1)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "héllo\u00a0wörld")
    writer.add_uint64("t.u64", 1 << 60)
    writer.add_int64("t.i64", -(1 << 60))
    writer.add_float64("t.f64", 1e-300)
    writer.add_string("t.empty", "")
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.5, -1.25])
    writer.add_array("t.strs", ["a", "", "ü" * 40])
    writer.add_array("t.bools", [True, False])
    writer.add_array("t.none", [])


def _tensors(writer: gguf.GGUFWriter) -> None:
    writer.add_uint32("llama.block_count", 1)
    writer.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(8, dtype=np.float16))
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((3, 5, 7), dtype=np.int32))
    q8 = np.zeros((2, 34), dtype=np.uint8)  # two Q8_0 blocks of 32 elements (34 bytes each)
    writer.add_tensor("q8", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def _vocabulary(writer: gguf.GGUFWriter) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(3000)] + ["<|im_end|>", "Ġ\u00e9"])
    writer.add_token_types([1] * 3002)
    writer.add_token_scores([float(-i) for i in range(3002)])
    writer.add_token_merges(["t o", "to k"])
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")


WRITTEN: dict[str, tuple[Callable[[gguf.GGUFWriter], None], dict[str, object]]] = {
    "every-value-type": (_every_value_type, {}),
    "tensors": (_tensors, {}),
    "tensors-aligned-64": (lambda w: (w.add_uint32("general.alignment", 64), _tensors(w)), {}),
    "vocabulary": (_vocabulary, {}),
    "big-endian": (lambda w: (_every_value_type(w), _tensors(w)),
                   {"endianess": gguf.GGUFEndian.BIG}),
}


@pytest.mark.parametrize("case", WRITTEN)
def test_written_ggufs_read_as_gguf_py_reads_them(tmp_path: Path, case: str) -> None:
    build, options = WRITTEN[case]
    assert assert_same_as_gguf_py(write_gguf(tmp_path / f"{case}.gguf", build, **options)) >= 1


def test_the_suites_vocabulary_builder_reads_the_same(tmp_path: Path) -> None:
    path = write_vocab_gguf(tmp_path / "v.gguf", [f"t{i}" for i in range(300)],
                            merges=["t 1"], pre="qwen2")
    assert assert_same_as_gguf_py(path) >= 5


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _header(*pairs: bytes, tensors: int = 0, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, len(pairs)) + b"".join(pairs)


def _pair(key: bytes, kind: int, value: bytes) -> bytes:
    return _string(key) + struct.pack("<I", kind) + value


@pytest.mark.parametrize(("data", "words"), [
    (_header(version=1), "version 1"),  # llama.cpp: GGUFv1 is no longer supported
    (_header(version=4), "version 4"),
    (_header(_pair(b"", 4, bytes(4))), "empty"),
    (_header(_pair(b"a", 4, bytes(4)), _pair(b"a", 4, bytes(4))), "twice"),
    (_header(_pair(b"a", 9, struct.pack("<IQ", 9, 1) + bytes(16))), "array of arrays"),
    (_header(_pair(b"a", 13, bytes(8))), "unknown value type"),
    (_header(_pair(b"general.alignment", 5, bytes(4))), "not uint32"),
    (_header(_pair(b"general.alignment", 4, struct.pack("<I", 48))), "power of two"),
    (_header(_pair(b"a", 9, struct.pack("<IQ", 8, 1 << 40))), "claims"),
])
def test_what_llamacpps_reader_refuses_is_refused(tmp_path: Path, data: bytes, words: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data + bytes(64))
    with path.open("rb") as handle, pytest.raises(GGUFError, match=words):
        read_gguf(handle)


def _tensor_info(name: bytes, dims: tuple[int, ...], kind: int = 0) -> bytes:
    return (_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
            + struct.pack("<IQ", kind, 0))


@pytest.mark.parametrize(("info", "words"), [
    (_tensor_info(b"x" * 64, (4,)), "64 bytes"),
    (_tensor_info(b"w", (1,) * 5), "5 dimensions"),
    (_tensor_info(b"w", (1 << 63,)), "negative"),
    (_tensor_info(b"w", (1 << 40, 1 << 40)), "overflows"),
    (_tensor_info(b"w", (4,), kind=4), "unknown GGML type"),  # Q4_2, removed from GGML
    (_tensor_info(b"w", (33,), kind=8), "whole blocks"),  # Q8_0 rows of 32
    (_tensor_info(b"w", (1 << 30,)), "the file holds"),
])
def test_tensor_infos_llamacpp_refuses(tmp_path: Path, info: bytes, words: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(_header(tensors=1) + info + bytes(64))
    with path.open("rb") as handle, pytest.raises(GGUFError, match=words):
        read_gguf(handle)


def test_a_repeated_tensor_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(_header(tensors=2) + _tensor_info(b"w", (4,)) * 2 + bytes(64))
    with path.open("rb") as handle, pytest.raises(GGUFError, match="twice"):
        read_gguf(handle)


def test_the_n24_gguf_is_walked_without_materialising_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan keeps the 3,000,000 tokens as one offset and a count: gguf-py's reader is never
    called, no token is read, and the scan's peak Python allocation stays under 1 MB."""
    path = n24_gguf(tmp_path / "n24.gguf")

    def refuse(*_: object) -> None:
        raise AssertionError("read beyond the header walk")

    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    monkeypatch.setattr("kernels_ref.gguf_reader.GGUF.array", refuse)
    tracemalloc.start()
    try:
        findings = scan_gguf_file(path, path.name)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [f for f in findings if f.severity >= Severity.high] == []
    assert peak < 1 << 20, peak


def test_the_n24_gguf_is_refused_by_the_diff_before_a_token_is_read(
    builtin_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("tokens read before the count was checked")

    monkeypatch.setattr("kernels_ref.gguf_reader.GGUF.array", refuse)
    why = tokenizer_mismatch(n24_gguf(tmp_path / "n24.gguf"), builtin_pair.target)
    assert why is not None and "tokenizer.ggml.tokens has 3,000,000 items" in why


def test_past_the_item_cap_is_a_limit_not_a_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kernels_ref.gguf_reader.MAX_ARRAY_ITEMS", 1000)
    path = n24_gguf(tmp_path / "n24.gguf", tokens=1001)
    with path.open("rb") as handle, pytest.raises(GGUFLimit, match="over 1000 array items"):
        read_gguf(handle)


def test_a_gguf_truncated_after_the_walk_is_an_error_not_a_sigbus(tmp_path: Path) -> None:
    """Nothing is mapped: a value read after another process truncated the file is a
    `GGUFError` (a memory map would kill the process with SIGBUS). In a child process, so a
    crash is seen as one."""
    path = tmp_path / "vocab.gguf"
    path.write_bytes((source_tree() / "models" / "ggml-vocab-qwen2.gguf").read_bytes())
    code = (
        "import os, sys\n"
        "from kernels_ref.gguf_reader import GGUFError, read_gguf\n"
        "with open(sys.argv[1], 'rb') as handle:\n"
        "    gguf = read_gguf(handle)\n"
        "    os.truncate(sys.argv[1], 4096)\n"
        "    try:\n"
        "        gguf.array('tokenizer.ggml.tokens')\n"
        "    except GGUFError as error:\n"
        "        print(error)\n"
    )
    child = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert child.returncode == 0, (child.returncode, child.stderr[-500:])
    assert "truncated while it was read" in child.stdout


def test_a_gguf_truncated_during_the_walk_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_vocab_gguf(tmp_path / "v.gguf", [f"tok{i}" for i in range(2000)])
    monkeypatch.setattr("kernels_ref.gguf_reader.WINDOW_BYTES", 4096)  # many reads
    pread = os.pread

    def pread_then_truncate(fd: int, count: int, offset: int) -> bytes:
        data = pread(fd, count, offset)
        os.truncate(path, 8192)  # another process cuts the file after the first read
        return data

    monkeypatch.setattr("kernels_ref.gguf_reader.os.pread", pread_then_truncate)
    with path.open("rb") as handle, pytest.raises(GGUFError, match="truncated while it was"):
        read_gguf(handle)
