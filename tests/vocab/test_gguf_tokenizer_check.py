"""The GGUF check on byte-level BPE vocabularies: merges and the pre-tokenizer, not only tokens.

A GGUF with the target's tokens but no pre-tokenizer type (or `default`, as early Llama 3
conversions had it) makes llama.cpp split text with its default pattern: the same text becomes
other ids. Tokenizer-only GGUFs are written with the `gguf` package.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dflash_guard.lossless.gguf_vocab import tokenizer_mismatch
from tests.support.scan_builders import write_vocab_gguf

SPLIT = {"type": "Split", "pattern": {"Regex": "\\\\p{L}+|\\\\s+"}, "behavior": "Isolated",
         "invert": False}


@pytest.fixture
def target(builtin_pair, tmp_path) -> Path:
    """The built-in target with one merge ("a b") and a splitting pre-tokenizer."""
    folder = tmp_path / "target"
    shutil.copytree(builtin_pair.target, folder)
    document = json.loads((folder / "tokenizer.json").read_text())
    document["model"]["vocab"]["ab"] = 264
    document["model"]["merges"] = ["a b"]
    document["pre_tokenizer"] = {"type": "Sequence",
                                 "pretokenizers": [SPLIT, document["pre_tokenizer"]]}
    (folder / "tokenizer.json").write_text(json.dumps(document))
    return folder


def write_gguf(target: Path, out: Path, *, pre: str | None, merges: list[str]) -> Path:
    document = json.loads((target / "tokenizer.json").read_text())
    tokens = {i: t for t, i in document["model"]["vocab"].items()}
    tokens.update({a["id"]: a["content"] for a in document["added_tokens"]})
    return write_vocab_gguf(out, [tokens.get(i, f"[PAD{i}]") for i in range(max(tokens) + 1)],
                            arch="llama", merges=merges, pre=pre)


def test_the_same_tokenizer_passes(target, tmp_path):
    assert tokenizer_mismatch(write_gguf(target, tmp_path / "t.gguf", pre="llama-bpe",
                                         merges=["a b"]), target) is None


@pytest.mark.parametrize("pre", [None, "default"])
def test_a_gguf_without_the_pre_tokenizer_is_refused(target, tmp_path, pre):
    why = tokenizer_mismatch(write_gguf(target, tmp_path / "t.gguf", pre=pre, merges=["a b"]),
                             target)
    assert why == (f"t.gguf and the target disagree on the tokenizer: the GGUF's pre-tokenizer "
                   f"is {pre or 'missing'}: llama.cpp splits text with its default pattern, not "
                   "the target's")


def test_other_merges_are_refused(target, tmp_path):
    why = tokenizer_mismatch(write_gguf(target, tmp_path / "t.gguf", pre="llama-bpe",
                                        merges=["b a"]), target)
    assert why is not None and "the merges differ from merge 0 on (1 in the GGUF, 1 in" in why


def test_a_vocabulary_without_a_split_pattern_needs_no_pre_tokenizer(builtin_pair, tmp_path):
    target = builtin_pair.target  # byte-level, no merges, no Split step: llama.cpp's default fits
    assert tokenizer_mismatch(write_gguf(target, tmp_path / "t.gguf", pre=None, merges=[]),
                              target) is None


def test_a_merge_of_two_added_tokens_never_applies(builtin_pair, tmp_path):
    """scripts/llamacpp.py gives a merge-less vocabulary one merge of two special tokens (llama.cpp
    needs the key): it can never apply, so it is no difference."""
    target = builtin_pair.target
    gguf_path = write_gguf(target, tmp_path / "t.gguf", pre="default",
                           merges=["<|bos|> <|endoftext|>"])
    assert tokenizer_mismatch(gguf_path, target) is None
    other = write_gguf(target, tmp_path / "o.gguf", pre="default", merges=["<|bos|> a"])
    assert "the merges differ from merge 0 on (1 in the GGUF, 0 in the target)" in (
        tokenizer_mismatch(other, target) or "")
