"""GGUF tokenizer metadata as llama.cpp's vocabulary loader reads it (issue 46, part 2): what it
refuses, and end-of-generation ids or CONTROL types on ordinary text.

The benign side is the 19 real vocabularies the pinned llama.cpp tree ships; each bad case is
one of them (Qwen2's, 151,936 ids) with one value changed in place. The lists of tokenizer
models and pre-tokenizers are the pinned tree's own, read from its `src/llama-vocab.cpp`, and
the pinned llama-server is the oracle for what the loader refuses: it stops at the vocabulary
for every refused file and gets past it (to the missing weights) for the real one.
"""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest

from dflash_guard import rules
from dflash_guard.scan.weights.gguf import scan_gguf_file
from dflash_guard.scan.weights.gguf_tokens import PRE_TOKENIZERS, TOKENIZER_MODELS
from kernels_ref.gguf_reader import read_gguf
from tests.support.llamacpp import build_server

pytestmark = pytest.mark.slow

VOCABS = ("aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm",
          "falcon", "gemma-4", "gpt-2", "gpt-neox", "llama-bpe", "llama-spm", "mpt",
          "nomic-bert-moe", "phi-3", "qwen2", "qwen35", "refact", "starcoder")
TOKEN_RULES = {rules.GGUF_TOKENS.id, rules.GGUF_METADATA.id}


def vocab(tree: Path, name: str) -> Path:
    return tree / "models" / f"ggml-vocab-{name}.gguf"


def edited(source: Path, out: Path, *, ints: dict[str, int] | None = None,
           texts: dict[str, str] | None = None, types: dict[int, int] | None = None,
           rename: dict[str, str] | None = None) -> Path:
    """A copy of `source` with values changed in place, each the same size: uint32 scalars,
    strings of the same length, token types, key names of the same length."""
    data = bytearray(source.read_bytes())
    with source.open("rb") as handle, read_gguf(handle) as header:
        for key, number in (ints or {}).items():
            field = header.find(key)
            assert field is not None and field.end - field.start == 4
            data[field.start:field.end] = struct.pack("<I", number)
        for key, text in (texts or {}).items():
            field = header.find(key)
            assert field is not None and field.end - field.start - 8 == len(text.encode())
            data[field.start + 8:field.end] = text.encode()
        kinds = header.find("tokenizer.ggml.token_type")
        for token, kind in (types or {}).items():
            assert kinds is not None
            data[kinds.start + 4 * token:kinds.start + 4 * token + 4] = struct.pack("<i", kind)
    for old, new in (rename or {}).items():
        assert len(old) == len(new)
        length = struct.pack("<Q", len(old))
        data = data.replace(length + old.encode(), length + new.encode(), 1)
    out.write_bytes(data)
    return out


def token_findings(path: Path) -> list[str]:
    return [f"{f.rule_id}: {f.message}" for f in scan_gguf_file(path, path.name)
            if f.rule_id in TOKEN_RULES]


def refused_at_vocabulary(path: Path) -> str | None:
    """llama-server's vocabulary error for `path`, or None when it got past the vocabulary."""
    done = subprocess.run([str(build_server()), "-m", str(path), "--port", "0"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0  # a vocabulary has no weights: it never serves
    match = re.search(r"error loading model vocabulary: ([^\n]+)", done.stderr)
    return match.group(1) if match else None


def test_the_lists_are_the_pinned_loaders(tree):
    source = (tree / "src" / "llama-vocab.cpp").read_text()
    start = source.index("void llama_vocab::impl::load(")
    body = source[start:source.index("unknown pre-tokenizer type", start)]
    assert set(re.findall(r'tokenizer_model == "([^"]+)"', body)) == TOKENIZER_MODELS
    assert set(re.findall(r'tokenizer_pre == "([^"]+)"', body)) == PRE_TOKENIZERS


@pytest.mark.parametrize("name", VOCABS)
def test_every_real_vocabulary_is_quiet(tree, name):
    assert token_findings(vocab(tree, name)) == []


@pytest.fixture(scope="module")
def qwen(tree) -> tuple[Path, list[str], list[str]]:
    """The real Qwen2 vocabulary, its tokens and merges."""
    path = vocab(tree, "qwen2")
    with path.open("rb") as handle, read_gguf(handle) as header:
        return path, header.array("tokenizer.ggml.tokens") or [], header.array(
            "tokenizer.ggml.merges") or []


def test_an_end_of_generation_id_on_a_word_is_a_finding(qwen, tmp_path):
    path, tokens, _ = qwen
    the = tokens.index("Ġthe")
    bad = edited(path, tmp_path / "eos.gguf", ints={"tokenizer.ggml.eos_token_id": the})
    [finding] = token_findings(bad)
    assert finding.startswith("DG-GGUF-TOKENS") and "eos_token_id = " in finding
    assert "'Ġthe'" in finding and "ends every answer" in finding


@pytest.mark.parametrize("text", ["Ċ", "Ġthe", "</"])
def test_a_control_type_on_ordinary_text_is_a_finding(qwen, tmp_path, text):
    """A newline (one character), a word, and a marker that ordinary text merges into."""
    path, tokens, merges = qwen
    assert text in tokens and (len(text) == 1 or text in {m.replace(" ", "") for m in merges})
    bad = edited(path, tmp_path / "control.gguf", types={tokens.index(text): 3})
    [finding] = token_findings(bad)
    assert finding.startswith("DG-GGUF-TOKENS") and repr(text) in finding
    assert "disappears from every answer" in finding


@pytest.mark.parametrize(("change", "error"), [
    ({"texts": {"tokenizer.ggml.pre": "qwen9"}}, "unknown pre-tokenizer type: 'qwen9'"),
    ({"texts": {"tokenizer.ggml.model": "gpt3"}}, "unknown tokenizer: 'gpt3'"),
    ({"rename": {"tokenizer.ggml.merges": "tokenizer.ggml.mergez"}},
     "cannot find tokenizer merges"),
])
def test_what_the_loader_refuses_is_a_finding(qwen, tmp_path, change, error):
    path, _, _ = qwen
    assert refused_at_vocabulary(path) is None  # the real one gets past the vocabulary
    bad = edited(path, tmp_path / "refused.gguf", **change)
    assert error in (refused_at_vocabulary(bad) or "")
    [finding] = token_findings(bad)
    assert finding.startswith("DG-GGUF-METADATA") and error.split(":")[0] in finding
