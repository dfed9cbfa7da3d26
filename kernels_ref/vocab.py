"""Real tokenizers rebuilt from the vocab-only GGUFs that llama.cpp's source tree ships.

The pinned llama.cpp sdist carries, under `models/`, vocab-only GGUFs (tokens, token types,
merges, the pre-tokenizer's name, special ids) and, for most, llama.cpp's tokenizer test vectors
(`.inp`: strings separated by `__ggml_vocab_test__` lines; `.out`: the ids the original Hugging Face
tokenizer gave each, one line per string). `build_tokenizer_json` turns a GGUF into a `tokenizers`
file, `read_vectors` reads the vectors that prove it:

- **qwen3** (`ggml-vocab-qwen2.gguf`, the 151,936-id BPE vocabulary Qwen2.5 and Qwen3 share):
  transformers' GGUF loader rebuilds it exactly (46 of 46 vectors).
- **llama3** (`ggml-vocab-llama-bpe.gguf`, 128,256 ids): transformers' loader misses one thing
  the file's `tokenizer.ggml.pre = "llama-bpe"` means to llama.cpp (src/llama-vocab.cpp) and to
  the Hub's Llama 3 `tokenizer.json`: `ignore_merges` (a pre-token that is itself in the vocabulary
  is one id, whatever the merges say: " Việt" is 101798, not " Vi" "ệ" "t"). It also adds an
  `<|endoftext|>` id 128,256 the file does not have and no BOS. The tokenizer is built here with
  `tokenizers` from the file's tokens, merges and control tokens, the split pattern transformers
  keeps for that pre-tokenizer name, `ignore_merges`, and BOS added as llama.cpp adds it.

Building takes minutes (transformers' loader) or seconds; callers cache the result
(`cached_tokenizer_json`). Needs transformers (the test extra).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels_ref.errors import RunnerError

BUILDER_VERSION = 1  # part of the cache key: bump when the built file would change
SEPARATOR = "\n__ggml_vocab_test__\n"
CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types


@dataclass(frozen=True)
class RealVocab:
    """One real vocabulary of the tree: its GGUF, chat template and special tokens."""

    name: str
    gguf: str  # under models/
    template: str  # under models/templates/
    size: int
    bos_token: str | None
    eos_token: str
    pad_token: str | None
    add_bos: bool  # whether the tokenizer adds BOS to plain text (llama.cpp's add_bos)


VOCABS: dict[str, RealVocab] = {
    "qwen3": RealVocab("qwen3", "ggml-vocab-qwen2.gguf", "Qwen-Qwen3-0.6B.jinja", 151_936,
                       None, "<|im_end|>", "<|endoftext|>", False),
    "llama3": RealVocab("llama3", "ggml-vocab-llama-bpe.gguf",
                        "meta-llama-Llama-3.1-8B-Instruct.jinja", 128_256,
                        "<|begin_of_text|>", "<|eot_id|>", None, True),
}


def real_vocab(name: str) -> RealVocab:
    """The vocabulary called `name` (`qwen3`, `llama3`); `RunnerError` for any other."""
    try:
        return VOCABS[name]
    except KeyError:
        choices = ", ".join(VOCABS)
        raise RunnerError(f"unknown vocabulary {name!r}; choose one of {choices}") from None


def read_vectors(gguf_path: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's test vectors of a vocab GGUF: `(text, expected ids)` per string, read as
    `tests/test-tokenizer-0.cpp` reads them."""
    inp = Path(f"{gguf_path}.inp").read_bytes().decode("utf-8")
    out = Path(f"{gguf_path}.out").read_text(encoding="utf-8").splitlines()
    texts = inp.split(SEPARATOR)
    if texts and texts[-1] == "":
        texts.pop()  # every string, the last one too, is followed by the separator
    if len(texts) != len(out):
        raise RunnerError(f"{gguf_path}: {len(texts)} test strings but {len(out)} id lines")
    return [(text, [int(i) for i in line.split()]) for text, line in zip(texts, out, strict=True)]


def _gguf_tokenizer(path: Path) -> dict[str, Any]:
    """The tokenizer keys of a GGUF, read with the bounded reader (`gguf_reader`)."""
    from kernels_ref.gguf_reader import GGUFError, read_gguf

    try:
        with path.open("rb") as handle, read_gguf(handle) as gguf:
            return {
                "model": gguf.value("tokenizer.ggml.model"),
                "pre": gguf.value("tokenizer.ggml.pre"),
                "tokens": gguf.array("tokenizer.ggml.tokens"),
                "types": gguf.array("tokenizer.ggml.token_type"),
                "merges": gguf.array("tokenizer.ggml.merges"),
                "bos_id": gguf.value("tokenizer.ggml.bos_token_id"),
            }
    except GGUFError as error:
        raise RunnerError(f"{path}: {error}") from None


def _transformers_json(models_dir: Path, vocab: RealVocab) -> str:
    """transformers' own GGUF conversion (exact for qwen2: 46/46 vectors)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(models_dir), gguf_file=vocab.gguf)
    return tokenizer.backend_tokenizer.to_str()


def _byte_level_bpe_json(models_dir: Path, vocab: RealVocab) -> str:
    """A byte-level BPE tokenizer built with `tokenizers` from the GGUF's keys, as llama.cpp
    reads them for a `llama-bpe` pre-tokenizer: split pattern, `ignore_merges`, BOS added."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, processors
    from tokenizers import pre_tokenizers as pre
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    keys = _gguf_tokenizer(models_dir / vocab.gguf)
    if keys["model"] != "gpt2" or keys["pre"] != "llama-bpe":
        raise RunnerError(f"{vocab.gguf}: expected a gpt2 model with the llama-bpe pre-tokenizer, "
                          f"found {keys['model']!r} / {keys['pre']!r}")
    tokens = keys["tokens"]
    bpe = models.BPE(
        vocab={token: index for index, token in enumerate(tokens)},
        merges=[tuple(merge.split(" ", 1)) for merge in keys["merges"]],
        ignore_merges=True,  # llama-vocab.cpp: pre "llama-bpe" -> ignore_merges = true
        fuse_unk=False,
        byte_fallback=False,
    )
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre.Sequence([
        pre.Split(Regex(GGUF_PRE_TOKENIZER_SPLITS[keys["pre"]]), behavior="isolated"),
        pre.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    # Serialised with add_prefix_space, trim_offsets and use_regex all true: the decoder takes
    # no settings (tokenizers ignores any passed) and those are its defaults.
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([
        AddedToken(token, special=True, normalized=False)
        for token, kind in zip(tokens, keys["types"], strict=True) if kind == CONTROL
    ])
    bos = tokens[int(keys["bos_id"])]
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                      special_tokens=[(bos, int(keys["bos_id"]))]),
    ])
    return tokenizer.to_str()


BUILDERS = {"qwen3": _transformers_json, "llama3": _byte_level_bpe_json}


def build_tokenizer_json(models_dir: Path, vocab: RealVocab) -> str:
    """The `tokenizer.json` text of `vocab`, built from `models_dir/vocab.gguf`."""
    try:
        import transformers  # noqa: F401 - both builders need it
    except ImportError:
        raise RunnerError("building a real vocabulary needs transformers (pip install "
                          "'dflash-guard[test]')") from None
    text = BUILDERS[vocab.name](models_dir, vocab)
    from tokenizers import Tokenizer

    size = Tokenizer.from_str(text).get_vocab_size(with_added_tokens=True)
    if size != vocab.size:
        raise RunnerError(f"{vocab.gguf}: built {size} ids, expected {vocab.size}")
    return text


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cached_tokenizer_json(models_dir: Path, vocab: RealVocab, cache_dir: Path) -> Path:
    """`tokenizer.json` of `vocab`, built once into `cache_dir` and reused afterwards.

    The file name carries the builder version and the GGUF's sha256, so a changed input or
    builder never reuses a stale file; it is written to a temporary name and moved in whole.
    """
    gguf = models_dir / vocab.gguf
    if not gguf.is_file():
        raise RunnerError(f"{gguf}: no such vocab GGUF (is this llama.cpp's models/ folder?)")
    path = cache_dir / f"{vocab.name}-v{BUILDER_VERSION}-{_sha256(gguf)[:16]}.tokenizer.json"
    if path.is_file():
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    text = build_tokenizer_json(models_dir, vocab)
    with tempfile.NamedTemporaryFile("w", dir=cache_dir, suffix=".partial", delete=False,
                                     encoding="utf-8") as staged:
        staged.write(text)
    os.replace(staged.name, path)
    return path


def tokenizer_config(vocab: RealVocab, max_length: int) -> dict[str, Any]:
    """`tokenizer_config.json` for `vocab` (the chat template is `chat_template.jinja`)."""
    return {
        "add_bos_token": vocab.add_bos,
        "add_eos_token": False,
        "bos_token": vocab.bos_token,
        "clean_up_tokenization_spaces": False,
        "eos_token": vocab.eos_token,
        "model_max_length": max_length,
        "pad_token": vocab.pad_token,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
