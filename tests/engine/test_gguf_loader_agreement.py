"""The GGUF scan agrees with llama.cpp's loader: each layout the pinned llama-server refuses to
load, the scan reports; the real conversion it serves, the scan passes.

The benign case is the built-in target converted by the pinned tree's own converter. Each bad
case is that file rewritten with gguf-py's writer with one thing changed: token scores or
types shorter than the tokens or of the wrong type, the head count missing or not dividing the
embedding, the KV head count not dividing the heads, a block's tensor missing, output rows that
disagree with the vocabulary. llama-server then loads each (`-m`, the model loader and
vocabulary loader of `src/llama-model.cpp`, `src/llama-vocab.cpp`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from dflash_guard.scan.weights.gguf import scan_gguf_file
from dflash_guard.severity import Severity
from tests.support.llamacpp import EngineUnavailable, build_server, convert, llama_server

pytestmark = pytest.mark.slow  # a llama-server start per layout, and the engine build

T = gguf.GGUFValueType
Edit = Callable[[dict[str, Any], dict[str, np.ndarray]], None]


@pytest.fixture(scope="module")
def converted(builtin_pair, tmp_path_factory) -> Path:
    return convert(builtin_pair.target, tmp_path_factory.mktemp("loader") / "target.gguf")


@pytest.fixture(scope="module")
def server() -> Path:
    return build_server()


def rewrite(source: Path, out: Path, edit: Edit) -> Path:
    """`source` rewritten by gguf-py's writer after `edit(fields, tensors)` changed it: fields
    map a key to (value, type, item type); tensors map a name to its numpy data."""
    reader = gguf.GGUFReader(source)
    fields: dict[str, Any] = {}
    for field in list(reader.fields.values())[3:]:  # past gguf-py's GGUF.* entries
        item = field.types[-1] if field.types[0] == T.ARRAY else None
        fields[field.name] = (field.contents(), field.types[0], item)
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    edit(fields, tensors)
    arch = fields.pop("general.architecture")[0]
    writer = gguf.GGUFWriter(str(out), arch)
    for key, (value, kind, item) in fields.items():
        writer.add_key_value(key, value, kind, item)
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def loads(server: Path, model: Path) -> str | None:
    """None when llama-server loads `model` and serves; else the end of its log."""
    try:
        with llama_server(server, model, context=64):
            return None
    except EngineUnavailable as refused:
        return str(refused)


def _tokens(fields: dict[str, Any]) -> list[str]:
    return list(fields["tokenizer.ggml.tokens"][0])


def _scores(length: Callable[[int], int], kind: T = T.FLOAT32) -> Edit:
    def edit(fields: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        count = length(len(_tokens(fields)))
        fields["tokenizer.ggml.scores"] = ([0.0 if kind == T.FLOAT32 else 0] * count, T.ARRAY,
                                           kind)
    return edit


def _types(length: Callable[[int], int], kind: T = T.INT32) -> Edit:
    def edit(fields: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        count = length(len(_tokens(fields)))
        fields["tokenizer.ggml.token_type"] = ([1.0 if kind == T.FLOAT32 else 1] * count,
                                               T.ARRAY, kind)
    return edit


def _key(key: str, value: int | None) -> Edit:
    def edit(fields: dict[str, Any], _: dict[str, np.ndarray]) -> None:
        if value is None:
            del fields[key]
        else:
            fields[key] = (value, T.UINT32, None)
    return edit


def _both(first: Edit, second: Edit) -> Edit:
    def edit(fields: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        first(fields, tensors)
        second(fields, tensors)
    return edit


def _drop_tensor(name: str) -> Edit:
    def edit(_: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        del tensors[name]
    return edit


def _output_rows(delta: int) -> Edit:
    def edit(fields: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        rows, width = tensors["token_embd.weight"].shape
        tensors["output.weight"] = np.zeros((rows + delta, width), dtype=np.float32)
    return edit


BAD: dict[str, tuple[Edit, str]] = {
    "scores-shorter": (_scores(lambda n: n - 1), "scores has"),
    "scores-wrong-type": (_scores(lambda n: n, T.UINT8), "scores is not an array"),
    "types-shorter": (_types(lambda n: n - 1), "token_type has"),
    "types-wrong-type": (_types(lambda n: n, T.FLOAT32), "token_type is not an array"),
    "head-count-missing": (_key("qwen3.attention.head_count", None), "head_count is missing"),
    "head-count-against-shapes": (_key("qwen3.attention.head_count", 6), "head counts make it"),
    "head-count-not-dividing": (_both(_key("qwen3.attention.key_length", None),
                                      _key("qwen3.attention.head_count", 6)),
                                "does not divide qwen3.embedding_length"),
    "kv-heads-not-dividing": (_key("qwen3.attention.head_count_kv", 3), "does not divide"),
    "block-tensor-missing": (_drop_tensor("blk.2.ffn_up.weight"), "block 2 lacks ffn_up"),
    "output-rows": (_output_rows(-8), "output.weight has"),
}


def test_the_real_conversion_loads_and_scans_clean(server, converted, tmp_path) -> None:
    assert scan_gguf_file(converted, converted.name) == []
    assert loads(server, converted) is None
    same = rewrite(converted, tmp_path / "same.gguf", lambda fields, tensors: None)
    assert scan_gguf_file(same, same.name) == []  # the rewriter alone changes nothing that counts
    assert loads(server, same) is None


@pytest.mark.parametrize("case", BAD)
def test_what_llamacpp_refuses_to_load_the_scan_reports(server, converted, tmp_path,
                                                        case: str) -> None:
    edit, words = BAD[case]
    bad = rewrite(converted, tmp_path / f"{case}.gguf", edit)
    loud = [f.message for f in scan_gguf_file(bad, bad.name) if f.severity >= Severity.high]
    assert any(words in message for message in loud), loud
    refused = loads(server, bad)
    assert refused is not None and "llama-server exited" in refused


def _renamed(old: str, new: str) -> Edit:
    def edit(_: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        tensors[new] = tensors.pop(old)
    return edit


def test_what_llamacpps_gguf_reader_refuses_the_scan_refuses(server, converted, tmp_path) -> None:
    """Two refusals of `ggml/src/gguf.cpp` itself, before any model loader: version 1, and a
    tensor name of 64 bytes (GGML_MAX_NAME counts the NUL)."""
    old = tmp_path / "v1.gguf"
    data = bytearray(converted.read_bytes())
    data[4:8] = (1).to_bytes(4, "little")
    old.write_bytes(bytes(data))
    long = rewrite(converted, tmp_path / "long.gguf", _renamed("output_norm.weight", "n" * 64))
    for bad, words in ((old, "version 1"), (long, "64 bytes")):
        findings = scan_gguf_file(bad, bad.name)
        assert [f.rule_id for f in findings] == ["DG-GGUF-MALFORMED"], findings
        assert words in findings[0].message
        refused = loads(server, bad)
        assert refused is not None and "llama-server exited" in refused
