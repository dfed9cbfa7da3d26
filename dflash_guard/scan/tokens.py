"""A model folder's token table, and what its tokens make an engine do to answers.

The table (`token_table`, `ordinary_token`) is read from every Hugging Face tokenizer file:
`tokenizer.json`'s `added_tokens` and model vocabulary, `tokenizer_config.json`'s
`added_tokens_decoder`, `added_tokens.json`.

`meaning_findings` (`rules.TOKENS_MEANING`) judges what needs no code to change every answer:
- an end-of-generation id (`eos_token_id` of `generation_config.json` or `config.json`, at the
  top level or under `text_config`) that is an ordinary vocabulary entry: vLLM and transformers
  stop on each of them, so every answer ends where the model writes that word;
- an added token marked special whose text is ordinary (one character, or none of the marker
  characters `<>[]|` every real special token has): the tokenizer splits it out of every input
  before the model sees it, and engines drop special tokens from answers (vLLM's
  `skip_special_tokens` is on by default), so the word silently disappears.
The benign side is the built-in pair and the real Qwen3 and Llama 3 vocabularies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dflash_guard import fileio, rules
from dflash_guard.findings import Finding

DETECTOR = "tokens"
MARKERS = frozenset("<>[]|")  # every real special token holds one of these


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file, or {} when absent or unreadable (the caller reports unreadable ones)."""
    if not path.is_file():
        return {}
    try:
        value = fileio.read_json(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def token_text(value: object) -> str | None:
    """The text of a token entry (`{"content": ...}`) or of a plain string."""
    value = value.get("content") if isinstance(value, dict) else value
    return value if isinstance(value, str) else None


def int_ids(value: object) -> list[int]:
    """The integer ids of a value that is one id or a list of them."""
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, int) and not isinstance(v, bool)]


def token_table(folder: Path) -> tuple[dict[str, int], set[int]]:
    """`content -> id` of every added token in `folder`, and the ids marked special."""
    by_content: dict[str, int] = {}
    special: set[int] = set()
    decoder = read_json(folder / "tokenizer_config.json").get("added_tokens_decoder")
    for token_id, entry in (decoder or {}).items() if isinstance(decoder, dict) else []:
        text = token_text(entry)
        if text is not None and str(token_id).isdigit():
            by_content[text] = int(token_id)
            if isinstance(entry, dict) and entry.get("special"):
                special.add(int(token_id))
    added = read_json(folder / "tokenizer.json").get("added_tokens")
    for entry in added if isinstance(added, list) else []:
        if isinstance(entry, dict) and int_ids(entry.get("id")) and token_text(entry):
            by_content[token_text(entry) or ""] = entry["id"]
            if entry.get("special"):
                special.add(entry["id"])
    for text, token_id in read_json(folder / "added_tokens.json").items():
        if int_ids(token_id):
            by_content.setdefault(text, token_id)
    return by_content, special


def ordinary_token(tokenizer: dict[str, Any], token_id: int) -> str | None:
    """The text of `token_id` when it is an ordinary entry of the model vocabulary of a parsed
    `tokenizer.json` (one that text encodes to: BPE/WordPiece/WordLevel `vocab`, Unigram's
    pieces) and not also an added token; None for added, special or unused ids, and when there
    is no vocabulary to tell."""
    added = tokenizer.get("added_tokens")
    if any(isinstance(entry, dict) and entry.get("id") == token_id
           for entry in (added if isinstance(added, list) else [])):
        return None
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        return next((text for text, value in vocab.items() if value == token_id
                     and not isinstance(value, bool)), None)
    if isinstance(vocab, list) and 0 <= token_id < len(vocab):  # Unigram: [piece, score]
        piece = vocab[token_id]
        return piece[0] if isinstance(piece, list) and piece and isinstance(piece[0], str) else None
    return None


def meaning_findings(folder: Path, prefix: str = "") -> list[Finding]:
    """`rules.TOKENS_MEANING` for the model in `folder` (see the module); `prefix` is how the scan
    shows the folder's files (`target/`)."""
    tokenizer = read_json(folder / "tokenizer.json")
    if not tokenizer:
        return []
    findings = []
    for name in ("generation_config.json", "config.json"):
        config = read_json(folder / name)
        for where, section in (("", config), ("text_config.", config.get("text_config"))):
            if not isinstance(section, dict):
                continue
            for token_id in int_ids(section.get("eos_token_id")):
                if (text := ordinary_token(tokenizer, token_id)) is not None:
                    findings.append(Finding.of(
                        rules.TOKENS_MEANING, prefix + name,
                        f"{where}eos_token_id {token_id} is the ordinary token {text!r}: engines "
                        "stop on it, so every answer ends where the model writes it",
                        detector=DETECTOR))
    added = tokenizer.get("added_tokens")
    ordinary = [entry for entry in (added if isinstance(added, list) else [])
                if isinstance(entry, dict) and entry.get("special") is True
                and isinstance(text := token_text(entry), str)
                and (len(text) <= 1 or not MARKERS & set(text))]
    if ordinary:
        shown = ", ".join(f"{entry.get('id')} {token_text(entry)!r}" for entry in ordinary[:5])
        findings.append(Finding.of(
            rules.TOKENS_MEANING, prefix + "tokenizer.json",
            f"{len(ordinary)} added token(s) marked special are ordinary text ({shown}): the "
            "tokenizer splits them out of every input and engines drop special tokens from "
            "answers, so that text silently disappears", detector=DETECTOR))
    return findings

