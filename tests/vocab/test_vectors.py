"""The real tokenizers rebuilt from llama.cpp's vocab GGUFs, against llama.cpp's own test vectors.

The `.inp`/`.out` vectors were written by llama.cpp's `tests/test-tokenizer-0.py` from the
original Hugging Face tokenizers, so they are the Hub tokenizer's answers: every one of the 46
strings must encode to its ids, for Qwen3 (the qwen2 vocabulary, via transformers' GGUF loader)
and Llama 3 (built with `tokenizers` from the GGUF's keys).
"""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from kernels_ref.vocab import VOCABS, cached_tokenizer_json, read_vectors, real_vocab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

VIET = "Cửa Việt"  # " Việt" is one Llama 3 id: only ignore_merges gives it


def mismatches(tokenizer: Tokenizer, vectors: list[tuple[str, list[int]]]) -> list[str]:
    return [text for text, ids in vectors
            if tokenizer.encode(text, add_special_tokens=False).ids != ids]


@pytest.mark.parametrize("name", sorted(VOCABS))
def test_every_vector_encodes_to_its_ids(name, tree, vocab_cache):
    vocab = real_vocab(name)
    models = tree / "models"
    vectors = read_vectors(models / vocab.gguf)
    assert len(vectors) == 46
    tokenizer = Tokenizer.from_file(str(cached_tokenizer_json(models, vocab, vocab_cache)))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == vocab.size
    assert mismatches(tokenizer, vectors) == []


def test_llama3_needs_ignore_merges(tree, vocab_cache):
    """Why transformers' GGUF conversion is not exact for Llama 3: without `ignore_merges`
    (what `tokenizer.ggml.pre = llama-bpe` means to llama.cpp) a vector fails."""
    models = tree / "models"
    vocab = real_vocab("llama3")
    document = json.loads(cached_tokenizer_json(models, vocab, vocab_cache).read_text())
    assert document["model"]["ignore_merges"] is True
    document["model"]["ignore_merges"] = False
    lossy = Tokenizer.from_str(json.dumps(document))
    assert mismatches(lossy, read_vectors(models / vocab.gguf)) == [VIET]


@pytest.mark.parametrize(("name", "text", "ids"), [
    ("llama3", "Hello", [128000, 9906]),  # BOS added, as llama.cpp adds it for llama-bpe
    ("qwen3", "Hello", [9707]),  # Qwen adds none
])
def test_special_tokens_on_plain_text(name, text, ids, tree, vocab_cache):
    path = cached_tokenizer_json(tree / "models", real_vocab(name), vocab_cache)
    assert Tokenizer.from_file(str(path)).encode(text).ids == ids


def test_the_cache_is_reused_and_keyed_by_the_gguf(tree, vocab_cache):
    models = tree / "models"
    path = cached_tokenizer_json(models, real_vocab("qwen3"), vocab_cache)
    stamp = path.stat().st_mtime_ns
    assert cached_tokenizer_json(models, real_vocab("qwen3"), vocab_cache) == path
    assert path.stat().st_mtime_ns == stamp
    assert "-v1-" in path.name

