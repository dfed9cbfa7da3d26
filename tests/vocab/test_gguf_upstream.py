"""A GGUF's vocabulary held against its upstream's tokenizer.json (issue 46 part 2,
`scan.upstream.gguf_differences`) on the real vocabularies: the pinned llama.cpp tree's vocab
GGUFs and the tokenizer.json transformers' GGUF loader builds from each (another
implementation's reading of the same file) agree; the same GGUF with two tokens swapped does
not."""

from __future__ import annotations

import json
from pathlib import Path

from dflash_guard.scan import upstream
from kernels_ref.gguf_reader import read_gguf
from kernels_ref.vocab import real_vocab


def _differences(gguf_path: Path, tokenizer: dict) -> list[str]:
    with gguf_path.open("rb") as handle, read_gguf(handle) as gguf:
        return upstream.gguf_differences(gguf, tokenizer, set())


def test_the_real_vocabularies_agree_and_a_swap_does_not(tree, vocab_pair, tmp_path):
    name, target, _ = vocab_pair
    gguf_path = tree / "models" / real_vocab(name).gguf
    tokenizer = json.loads((target / "tokenizer.json").read_text(encoding="utf-8"))
    assert _differences(gguf_path, tokenizer) == []

    vocab = tokenizer["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    vocab[by_id[1000]], vocab[by_id[1001]] = 1001, 1000
    found = _differences(gguf_path, tokenizer)
    assert found == [f"token 1000 {by_id[1000]!r} (upstream {by_id[1001]!r})",
                     f"token 1001 {by_id[1001]!r} (upstream {by_id[1000]!r})"]
