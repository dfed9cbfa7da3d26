"""Does a GGUF carry the same tokenizer as the safetensors target it was converted from?

A diff of an engine against the reference runner sends token ids, so a GGUF whose vocabulary or
special tokens differ would be compared on ids that mean other things: such a GGUF is refused
before any prompt is sent. The GGUF side is its `tokenizer.ggml.tokens`,
the EOS/BOS ids); the target side is `tokenizer.json` (`model.vocab` plus `added_tokens`) and the
EOS ids of `generation_config.json` / `config.json`. Ids the GGUF pads beyond the Hugging Face
vocabulary (`[PAD<i>]`, written by llama.cpp's converter) are not compared. A byte-level BPE
GGUF must also carry the target's merges, in order, and name its pre-tokenizer
(`tokenizer.ggml.pre`): without one (or with `default`, as early Llama 3 conversions had it)
llama.cpp splits text with its default pattern, not the one the target's `tokenizer.json`
splits with, and the same text becomes other ids. Every file is read bounded (`fileio`); the
GGUF's header is walked by the one bounded reader (`kernels_ref.gguf_reader`) and its array
counts are checked against the target before any array is read. Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.fileio import open_binary, read_input_json
from kernels_ref.gguf_reader import ARRAY, GGUF, GGUFError, read_gguf

MAX_LISTED = 3
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024  # far above any real tokenizer.json (Gemma 3: 33 MB)
MERGES = "tokenizer.ggml.merges"


@dataclass(frozen=True)
class HFTokenizer:
    """What the check compares of the target's `tokenizer.json`, and its vocabulary size."""

    tokens: dict[int, str]
    merges: list[str] | None  # "a b" per merge; None for a model without merges
    added: frozenset[str]  # added tokens: split out before BPE, never merged
    splits: bool  # whether its pre-tokenizer splits text with a pattern (a `Split` step)
    vocab_size: int  # config.json's (llama.cpp pads the GGUF's tokens up to it), at least the ids

    def allowed_items(self, key: str) -> int:
        """The most items a conversion of this target writes in array `key`: its vocabulary;
        for merges its own count (Llama 3: 280,147 for 128,256 tokens) or up to its vocabulary
        (llama.cpp writes a placeholder merge for a tokenizer with none)."""
        return max(len(self.merges or ()), self.vocab_size) if key == MERGES else self.vocab_size


def _json(path: Path, what: str, limit: int = MAX_TOKENIZER_BYTES) -> dict[str, Any]:
    document = read_input_json(path, what, limit)
    if not isinstance(document, dict):
        raise InputError(f"cannot read {what} {path}: not a JSON object")
    return document


def _hf_tokenizer(target_dir: Path) -> HFTokenizer:
    path = target_dir / "tokenizer.json"
    document = _json(path, "the target's tokenizer")
    try:
        vocab = dict(document["model"]["vocab"])
        added = document.get("added_tokens", [])
        tokens = {int(token_id): str(text) for text, token_id in vocab.items()}
        for entry in added:
            tokens[int(entry["id"])] = str(entry["content"])
        merges = document["model"].get("merges")
        if merges is not None:
            merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
        added_texts = frozenset(str(entry["content"]) for entry in added)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InputError(f"cannot read the target's tokenizer {path}: {error!r}") from None
    splits = '"type": "Split"' in json.dumps(document.get("pre_tokenizer"))
    vocab_size = _json(target_dir / "config.json", "the target's config").get("vocab_size")
    sizes = [max(tokens, default=-1) + 1]
    if isinstance(vocab_size, int) and not isinstance(vocab_size, bool):
        sizes.append(vocab_size)
    return HFTokenizer(tokens, merges, added_texts, splits, max(sizes))


def _eos_ids(target_dir: Path) -> set[int]:
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        path = target_dir / name
        if not path.is_file():
            continue
        value = _json(path, "the target's config").get("eos_token_id")
        ids.update(v for v in (value if isinstance(value, list) else [value]) if isinstance(v, int))
        if ids:
            break
    return ids


@dataclass(frozen=True)
class GGUFTokenizer:
    """What the check compares of the GGUF's `tokenizer.ggml.*` keys."""

    tokens: list[str]
    eos: int | None
    model: str | None  # tokenizer.ggml.model: "gpt2" is byte-level BPE
    pre: str | None  # tokenizer.ggml.pre
    merges: list[str] | None


def _gguf_tokenizer(gguf: GGUF) -> GGUFTokenizer:
    def text(key: str) -> str | None:
        value = gguf.value(key)
        return value if isinstance(value, str) else None

    eos = gguf.value("tokenizer.ggml.eos_token_id")
    tokens, merges = (gguf.array(key) if (field := gguf.find(key)) and field.type == ARRAY
                      else None for key in ("tokenizer.ggml.tokens", MERGES))
    return GGUFTokenizer([str(t) for t in tokens or []],
                         int(eos) if isinstance(eos, int) and not isinstance(eos, bool) else None,
                         text("tokenizer.ggml.model"), text("tokenizer.ggml.pre"),
                         [str(m) for m in merges] if merges is not None else None)


def _read_tokenizer(gguf_path: Path, hf: HFTokenizer) -> GGUFTokenizer | str:
    """The GGUF's tokenizer keys, or why it cannot be a conversion of the target: an array
    longer than the target allows, found from the header before any array is read."""
    try:
        with open_binary(gguf_path) as handle, read_gguf(handle) as gguf:
            for key, field in gguf.fields.items():
                limit = hf.allowed_items(key)
                if field.type == ARRAY and field.count > limit:
                    return (f"{gguf_path.name} is not a conversion of the target: {key} has "
                            f"{field.count:,} items; the target allows {limit:,}")
            return _gguf_tokenizer(gguf)
    except GGUFError as error:
        raise InputError(f"cannot read GGUF {gguf_path}: {error}") from None
    except OSError as error:
        raise InputError(f"cannot read GGUF {gguf_path}: {error.strerror or error}") from None


def _bpe_problems(gguf: GGUFTokenizer, hf: HFTokenizer) -> list[str]:
    """A byte-level BPE GGUF's merges and pre-tokenizer against the target's."""
    if gguf.model != "gpt2" or hf.merges is None:
        return []
    problems = []

    def applicable(merges: list[str]) -> list[str]:
        """Without merges of two added tokens: those never apply (scripts/llamacpp.py writes
        one into a GGUF whose tokenizer has no merges, as llama.cpp needs the key)."""
        return [m for m in merges if not set(m.split(" ", 1)) <= hf.added]

    ours, theirs = applicable(gguf.merges or []), applicable(hf.merges)
    if ours != theirs:
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                     min(len(ours), len(theirs)))
        problems.append(f"the merges differ from merge {first} on ({len(ours)} in the GGUF, "
                        f"{len(theirs)} in the target)")
    if hf.splits and gguf.pre in (None, "default"):
        problems.append(f"the GGUF's pre-tokenizer is {gguf.pre or 'missing'!s}: llama.cpp "
                        "splits text with its default pattern, not the target's")
    return problems


def tokenizer_mismatch(gguf_path: Path, target_dir: Path) -> str | None:
    """Why the GGUF's tokenizer is not the target's (None when they agree).

    The GGUF's array counts are bounded by the target first: an array longer than the
    target's vocabulary (or its merges) is a disagreement, found before it is read."""
    hf = _hf_tokenizer(target_dir)
    gguf = _read_tokenizer(gguf_path, hf)
    if isinstance(gguf, str):
        return gguf
    gguf_tokens, gguf_eos = gguf.tokens, gguf.eos
    if not gguf_tokens:
        return f"{gguf_path.name} has no tokenizer.ggml.tokens"
    hf_tokens = hf.tokens
    problems = _bpe_problems(gguf, hf)
    for token_id in sorted(hf_tokens):
        if token_id >= len(gguf_tokens):
            problems.append(f"id {token_id} ({hf_tokens[token_id]!r}) is missing from the GGUF")
        elif gguf_tokens[token_id] != hf_tokens[token_id]:
            problems.append(f"id {token_id} is {gguf_tokens[token_id]!r} in the GGUF, "
                            f"{hf_tokens[token_id]!r} in the target")
    eos_ids = _eos_ids(target_dir)
    if gguf_eos is not None and eos_ids and gguf_eos not in eos_ids:
        problems.append(f"the GGUF's EOS is id {gguf_eos}, the target's {sorted(eos_ids)}")
    if not problems:
        return None
    more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
    return (f"{gguf_path.name} and the target disagree on the tokenizer: "
            f"{'; '.join(problems[:MAX_LISTED])}{more}")
