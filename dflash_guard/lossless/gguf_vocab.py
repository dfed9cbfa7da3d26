"""Does a GGUF carry the same tokenizer as the safetensors target it was converted from?

A diff of an engine against the reference runner sends token ids, so a GGUF whose vocabulary or
special tokens differ would be compared on ids that mean other things: such a GGUF is refused
before any prompt is sent. The GGUF side is read with the `gguf` package (`tokenizer.ggml.tokens`,
the EOS/BOS ids); the target side is `tokenizer.json` (`model.vocab` plus `added_tokens`) and the
EOS ids of `generation_config.json` / `config.json`. Ids the GGUF pads beyond the Hugging Face
vocabulary (`[PAD<i>]`, written by llama.cpp's converter) are not compared. Torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dflash_guard.errors import InputError

MAX_LISTED = 3


def _hf_tokens(target_dir: Path) -> dict[int, str]:
    path = target_dir / "tokenizer.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        vocab = dict(document["model"]["vocab"])
        added = document.get("added_tokens", [])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"cannot read the target's tokenizer {path}: {error}") from None
    tokens = {int(token_id): str(text) for text, token_id in vocab.items()}
    for entry in added:
        tokens[int(entry["id"])] = str(entry["content"])
    return tokens


def _eos_ids(target_dir: Path) -> set[int]:
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        path = target_dir / name
        if not path.is_file():
            continue
        try:
            value = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
        except (OSError, ValueError) as error:
            raise InputError(f"cannot read {path}: {error}") from None
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
    """Why the GGUF's tokenizer is not the target's (None when they agree)."""
    gguf_tokens, gguf_eos = _gguf_fields(gguf_path)
    if not gguf_tokens:
        return f"{gguf_path.name} has no tokenizer.ggml.tokens"
    hf_tokens = _hf_tokens(target_dir)
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
