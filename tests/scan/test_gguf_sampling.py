"""A GGUF whose `general.sampling.*` metadata changes every answer llama.cpp gives (issue 46,
part 2, the llama.cpp side): DG-GENERATION-DEFAULTS.

The benign side is the 19 real vocabularies the pinned llama.cpp tree ships and a real
conversion of the built-in pair; each bad case is a crafted GGUF written with gguf-py's writer.
The key list, their value kinds, llama.cpp's defaults and the sampler names are read back from
the pinned tree's source; the pinned llama-server is the oracle in
tests/engine/test_gguf_sampling_served.py.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import gguf
import pytest

from dflash_guard import rules
from dflash_guard.scan import scan_paths
from dflash_guard.scan.weights import gguf_sampling
from dflash_guard.scan.weights.gguf import scan_gguf_file
from dflash_guard.severity import Severity
from tests.support.llamacpp import source_tree
from tests.support.scan_builders import write_gguf

RULE = rules.GENERATION_DEFAULTS.id
W = gguf.GGUFWriter
VOCABS = ("aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm",
          "falcon", "gemma-4", "gpt-2", "gpt-neox", "llama-bpe", "llama-spm", "mpt",
          "nomic-bert-moe", "phi-3", "qwen2", "qwen35", "refact", "starcoder")
K = "general.sampling."


def _write(path: Path, build: Callable[[gguf.GGUFWriter], None]) -> Path:
    """A small vocabulary GGUF (no tensors) with the keys `build` adds."""

    def vocabulary_then_build(writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model("llama")
        writer.add_token_list(["<unk>", "<s>", "</s>", "a", "b"])
        build(writer)

    return write_gguf(path, vocabulary_then_build)


def _found(path: Path, **options: frozenset[str]) -> list:
    return [f for f in scan_gguf_file(path, path.name, **options) if f.rule_id == RULE]


# (name, what the writer adds, severity, words the message holds)
BAD: list[tuple[str, Callable[[W], None], Severity, str]] = [
    ("repeat-penalty", lambda w: w.add_sampling_penalty_repeat(1.3), Severity.high,
     f"{K}penalty_repeat 1.3"),
    ("repeat-penalty-whole-context",
     lambda w: (w.add_sampling_penalty_repeat(0.5), w.add_sampling_penalty_last_n(-1)),
     Severity.high, f"{K}penalty_repeat 0.5, {K}penalty_last_n -1"),
    ("xtc", lambda w: w.add_sampling_xtc_probability(0.5), Severity.high,
     f"{K}xtc_probability 0.5"),
    ("no-temperature-sampler", lambda w: w.add_sampling_sequence("top_k;top_p"), Severity.high,
     "has no temperature sampler"),
    ("unknown-names-only", lambda w: w.add_sampling_sequence("greedy"), Severity.high,
     "has no temperature sampler"),
    ("infill-first", lambda w: w.add_sampling_sequence("infill;temperature"), Severity.high,
     "runs infill before the temperature"),
    ("mirostat-3", lambda w: w.add_sampling_mirostat(3), Severity.high,
     f"{K}mirostat 3: llama.cpp aborts"),
    ("a-string-temp", lambda w: w.add_string(K + "temp", "0.6"), Severity.high,
     f"{K}temp is string, not float32"),
    ("a-uint32-top-k", lambda w: w.add_uint32(K + "top_k", 20), Severity.high,
     f"{K}top_k is uint32, not int32"),
    ("an-array-penalty", lambda w: w.add_array(K + "penalty_repeat", [1.5]), Severity.high,
     f"{K}penalty_repeat is array"),
    ("nan-temp", lambda w: w.add_sampling_temp(float("nan")), Severity.high,
     f"{K}temp nan: not finite"),
    ("infinite-penalty", lambda w: w.add_sampling_penalty_repeat(float("inf")), Severity.high,
     f"{K}penalty_repeat inf: not finite"),
    # what a conversion of Qwen3's generation_config.json writes
    ("qwen3-like", lambda w: (w.add_sampling_temp(0.6), w.add_sampling_top_k(20),
                              w.add_sampling_top_p(0.95)), Severity.medium,
     f"{K}top_k 20, {K}temp 0.6: sampling defaults"),
    ("mirostat-2", lambda w: w.add_sampling_mirostat(2), Severity.medium, f"{K}mirostat 2"),
    ("xtc-disabled-by-its-threshold",
     lambda w: (w.add_sampling_xtc_probability(0.5), w.add_sampling_xtc_threshold(0.6)),
     Severity.medium, f"{K}xtc_probability 0.5, {K}xtc_threshold 0.6"),
    ("penalty-over-no-tokens",
     lambda w: (w.add_sampling_penalty_repeat(1.5), w.add_sampling_penalty_last_n(0)),
     Severity.medium, f"{K}penalty_last_n 0, {K}penalty_repeat 1.5"),
    # llama.cpp reads keys as C strings, the first in file order: the later exact key is unread
    ("a-penalty-behind-a-nul",
     lambda w: (w.add_float32(K + "penalty_repeat\0x", 1.3), w.add_sampling_penalty_repeat(1.0)),
     Severity.high, f"{K}penalty_repeat 1.3"),
    ("penalty-after-the-temperature",
     lambda w: (w.add_sampling_penalty_repeat(1.5),
                w.add_sampling_sequence("Top-K;TEMP;penalties")),
     Severity.medium, f"{K}penalty_repeat 1.5, {K}sequence 'Top-K;TEMP;penalties'"),
]


@pytest.mark.parametrize(("name", "build", "severity", "words"), BAD, ids=[b[0] for b in BAD])
def test_each_crafted_file_is_a_finding(tmp_path, name, build, severity, words):
    path = _write(tmp_path / f"{name}.gguf", build)
    found = _found(path)
    assert max(f.severity for f in found) == severity, [f.message for f in found]
    assert any(words in f.message for f in found), [f.message for f in found]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert all(f"sha256 {digest}: once read" in f.message and f.detector == "gguf"
               for f in found)


QUIET: list[tuple[str, Callable[[W], None]]] = [
    ("nothing", lambda w: None),
    ("llama-cpp-defaults", lambda w: (
        w.add_sampling_sequence("penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;"
                                "temperature"),
        w.add_sampling_top_k(40), w.add_sampling_top_p(0.95), w.add_sampling_min_p(0.05),
        w.add_sampling_xtc_probability(0.0), w.add_sampling_xtc_threshold(0.1),
        w.add_sampling_temp(0.8), w.add_sampling_penalty_last_n(64),
        w.add_sampling_penalty_repeat(1.0), w.add_sampling_mirostat(0),
        w.add_sampling_mirostat_tau(5.0), w.add_sampling_mirostat_eta(0.1))),
    # std::to_string prints six decimals: llama.cpp reads 1.0000001 back as 1
    ("a-penalty-under-six-decimals", lambda w: w.add_sampling_penalty_repeat(1.0000001)),
    ("an-empty-sequence", lambda w: w.add_sampling_sequence("")),  # not applied
]


@pytest.mark.parametrize(("name", "build"), QUIET, ids=[q[0] for q in QUIET])
def test_neutral_values_are_quiet(tmp_path, name, build):
    assert _found(_write(tmp_path / f"{name}.gguf", build)) == []


def test_the_sequence_is_read_as_llama_cpp_reads_it():
    assert gguf_sampling.sequence_of(b"temp;Nucleus;bogus;TOP-K;minp") == (
        "temperature", "top_p", "top_k", "min_p")
    assert gguf_sampling.sequence_of(b"top_k\0;temperature") == ("top_k",)  # a C string
    assert gguf_sampling.sequence_of(b";" * 511 + b"temperature") == ()  # past the buffer


def test_a_reviewed_digest_clears_the_file_and_no_other(tmp_path):
    path = _write(tmp_path / "penalty.gguf", lambda w: w.add_sampling_penalty_repeat(1.3))
    other = _write(tmp_path / "other.gguf", lambda w: w.add_sampling_penalty_repeat(1.4))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert _found(path, reviewed_files=frozenset({digest})) == []
    assert _found(other, reviewed_files=frozenset({digest})) != []
    # through the scan, as the gate and `scan --reviewed` pass it
    folder = tmp_path / "model"
    folder.mkdir()
    path.rename(folder / "model.gguf")
    assert [f for f in scan_paths([folder]).findings if f.rule_id == RULE] != []
    assert [f for f in scan_paths([folder], reviewed_files=frozenset({digest})).findings
            if f.rule_id == RULE] == []


def test_the_keys_and_defaults_are_the_pinned_trees():
    """A tree bump that adds a key, changes how one is read or changes a default fails here."""
    tree = source_tree()
    arch = (tree / "src" / "llama-arch.cpp").read_text()
    assert set(re.findall(r'"general\.sampling\.(\w+)"', arch)) == {
        *gguf_sampling.KEYS, gguf_sampling.SEQUENCE}
    common = (tree / "common" / "common.cpp").read_text()
    read = {key: kind for kind, key in re.findall(
        r"get_(int32|float)\(llama_model_meta_key_str\(LLAMA_MODEL_META_KEY_SAMPLING_(\w+)\)",
        common)}
    assert {key.lower(): kind for key, kind in read.items()} == {
        name: "int32" if kind == gguf_sampling.INT32 else "float"
        for name, (kind, _) in gguf_sampling.KEYS.items()}
    assert "char buf[512]" in common[common.index("// Sampling sequence"):]
    header = (tree / "common" / "common.h").read_text()
    body = header[header.index("struct common_params_sampling {"):]
    body = body[:body.index("std::string print() const;")]
    for name, (_, default) in gguf_sampling.KEYS.items():  # the same names as its fields
        match = re.search(rf"\b{name}\s*=\s*([-0-9.]+)f?;", body)
        assert match and float(match.group(1)) == default, name
    listed = re.findall(r"COMMON_SAMPLER_TYPE_(\w+),", body)
    names = {"TYPICAL_P": "typ_p"}
    assert tuple(names.get(s, s.lower()) for s in listed) == gguf_sampling.DEFAULT_SEQUENCE
    sampling = (tree / "common" / "sampling.cpp").read_text()
    start = sampling.index("common_sampler_types_from_names(")
    canonical = set(re.findall(r'\{ "(\w+)",\s+COMMON_SAMPLER_TYPE_\w+\s*\}',
                               sampling[start:start + 1500]))
    assert canonical == set(gguf_sampling.SAMPLER_NAMES.values())
    assert '"unknown mirostat version"' in sampling


@pytest.mark.parametrize("name", VOCABS)
def test_every_real_vocabulary_is_quiet(name):
    path = source_tree() / "models" / f"ggml-vocab-{name}.gguf"
    assert _found(path) == []
