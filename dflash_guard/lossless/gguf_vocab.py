"""Does a GGUF carry the same tokenizer as the safetensors target it was converted from?

A diff of an engine against the reference runner sends token ids, so a GGUF whose vocabulary or
special tokens differ would be compared on ids that mean other things: such a GGUF is refused
before any prompt is sent. The GGUF side is read with the `gguf` package (`tokenizer.ggml.tokens`,
the EOS/BOS ids); the target side is `tokenizer.json` (`model.vocab` plus `added_tokens`) and the
EOS ids of `generation_config.json` / `config.json`. Ids the GGUF pads beyond the Hugging Face
vocabulary (`[PAD<i>]`, written by llama.cpp's converter) are not compared. Every file is read
bounded (`fileio`), and the GGUF's counts are checked against the target before the reader
walks them (`gguf_bounds`). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input_json
from dflash_guard.lossless.gguf_bounds import TooManyItems, check_counts

MAX_LISTED = 3
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024  # far above any real tokenizer.json (Gemma 3: 33 MB)
MERGES = "tokenizer.ggml.merges"


@dataclass(frozen=True)
class _Target:
    """What the GGUF is compared with: the target's tokens by id, merge count and vocabulary."""

    tokens: dict[int, str]
    merges: int
    vocab_size: int  # config.json's (llama.cpp pads the GGUF's tokens up to it), at least the ids

    def allowed_items(self, key: str) -> int:
        """The most items a conversion of this target writes in array `key`: its vocabulary;
        for merges its own count (Llama 3: 280,147 for 128,256 tokens) or up to its vocabulary
        (llama.cpp writes a placeholder merge for a tokenizer with none)."""
        return max(self.merges, self.vocab_size) if key == MERGES else self.vocab_size


def _json(path: Path, what: str, limit: int = MAX_TOKENIZER_BYTES) -> dict[str, Any]:
    document = read_input_json(path, what, limit)
    if not isinstance(document, dict):
        raise InputError(f"cannot read {what} {path}: not a JSON object")
    return document


def _target(target_dir: Path) -> _Target:
    path = target_dir / "tokenizer.json"
    document = _json(path, "the target's tokenizer")
    try:
        model = document["model"]
        tokens = {int(token_id): str(text) for text, token_id in dict(model["vocab"]).items()}
        for entry in document.get("added_tokens", []):
            tokens[int(entry["id"])] = str(entry["content"])
        merges = len(model.get("merges") or [])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InputError(f"cannot read the target's tokenizer {path}: {error!r}") from None
    vocab_size = _json(target_dir / "config.json", "the target's config").get("vocab_size")
    sizes = [max(tokens, default=-1) + 1]
    if isinstance(vocab_size, int) and not isinstance(vocab_size, bool):
        sizes.append(vocab_size)
    return _Target(tokens, merges, max(sizes))


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


def _gguf_fields(gguf_path: Path) -> tuple[list[str], int | None]:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(gguf_path)
        tokens_field = reader.fields.get("tokenizer.ggml.tokens")
        eos_field = reader.fields.get("tokenizer.ggml.eos_token_id")
        tokens = [str(t) for t in tokens_field.contents()] if tokens_field else []
        eos: Any = eos_field.contents() if eos_field else None
    except Exception as error:  # noqa: BLE001 - the reader raises many types on bad input
        raise InputError(f"cannot read GGUF {gguf_path}: {type(error).__name__}: {error}") from None
    return tokens, int(eos) if isinstance(eos, int) else None


def tokenizer_mismatch(gguf_path: Path, target_dir: Path) -> str | None:
    """Why the GGUF's tokenizer is not the target's (None when they agree).

    The GGUF's header counts are bounded by the target first (`gguf_bounds`): an array longer
    than the target's vocabulary (or its merges) is a disagreement, found before it is read."""
    target = _target(target_dir)
    try:
        check_counts(gguf_path, target.allowed_items)
    except TooManyItems as error:
        return f"{gguf_path.name} is not a conversion of the target: {error}"
    gguf_tokens, gguf_eos = _gguf_fields(gguf_path)
    if not gguf_tokens:
        return f"{gguf_path.name} has no tokenizer.ggml.tokens"
    hf_tokens = target.tokens
    problems = []
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
