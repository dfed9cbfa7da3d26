"""The target's (and drafter's) token table, read from every tokenizer file, for the mask check.

A mask token must not reuse an id the target gives meaning to: pad/eos/bos/unk/stop ids
(`config.json`, `generation_config.json`), special tokens named in `tokenizer_config.json` or
`special_tokens_map.json`, tokens marked special in `tokenizer.json`'s `added_tokens` or in
`added_tokens_decoder`, and the control tokens a chat template writes (`<|im_start|>`). A token
whose text says it is a mask token is the intended one, not an alias.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from dflash_guard.scan import jsonfile

_SPECIAL_KEYS = ("pad_token", "eos_token", "bos_token", "unk_token", "sep_token", "cls_token")
_ID_KEYS = ("pad_token_id", "eos_token_id", "bos_token_id", "stop_token_ids")
# Control tokens of every spelling templates write: `<|im_start|>`, DeepSeek's full-width
# `<｜User｜>`, `<think>` and its closing `</think>`, `[INST]`/`[/INST]`, GLM's `[gMASK]`.
_CONTROL_TOKEN = re.compile(
    r"<[|｜][^|｜<>\s]{1,40}[|｜]>|</?[a-z_]{2,30}>|\[/?[A-Za-z_]{3,30}\]")
_MASK_TOKEN = re.compile(r"(?:<\|?|\[)\s*(?:[a-z0-9]+_)?mask(?:_token)?\s*(?:\|?>|\])",
                         re.IGNORECASE)
# Llama 3's 250 `<|reserved_special_token_N|>` are marked special yet mean nothing: free for a
# mask unless a config or template names one.
_FREE_RESERVED = re.compile(r"<\|reserved_special_token_\d+\|>")


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file, or {} when absent or unreadable (the caller reports unreadable ones)."""
    if not path.is_file():
        return {}
    try:
        value = jsonfile.read(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _is_mask(content: str | None) -> bool:
    """A token whose whole text is a mask token's (`<|mask|>`, `<mask>`, `[MASK]`,
    `<|dflash_mask|>`, `<|mask_token|>`) is the one meant for the drafter's mask; one whose text
    merely contains "mask" (GLM's `[gMASK]`/`[sMASK]`, which its template writes) is not."""
    return content is not None and _MASK_TOKEN.fullmatch(content) is not None


def _content(value: object) -> str | None:
    value = value.get("content") if isinstance(value, dict) else value
    return value if isinstance(value, str) else None


def _int_ids(value: object) -> list[int]:
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, int) and not isinstance(v, bool)]


def token_table(folder: Path) -> tuple[dict[str, int], set[int]]:
    """`content -> id` of every added token in `folder`, and the ids marked special."""
    by_content: dict[str, int] = {}
    special: set[int] = set()
    decoder = read_json(folder / "tokenizer_config.json").get("added_tokens_decoder")
    for token_id, entry in (decoder or {}).items() if isinstance(decoder, dict) else []:
        content = _content(entry)
        if content is not None and str(token_id).isdigit():
            by_content[content] = int(token_id)
            if isinstance(entry, dict) and entry.get("special"):
                special.add(int(token_id))
    added = read_json(folder / "tokenizer.json").get("added_tokens")
    for entry in added if isinstance(added, list) else []:
        if isinstance(entry, dict) and _int_ids(entry.get("id")) and _content(entry):
            by_content[_content(entry) or ""] = entry["id"]
            if entry.get("special"):
                special.add(entry["id"])
    for content, token_id in read_json(folder / "added_tokens.json").items():
        if _int_ids(token_id):
            by_content.setdefault(content, token_id)
    return by_content, special


def resolve_token(text: str, folders: list[Path]) -> int | None:
    """The id of the token `text` in the first folder whose tokenizer files define it."""
    for folder in folders:
        token_id = token_table(folder)[0].get(text)
        if token_id is not None:
            return token_id
    return None


def reserved_token_ids(target_dir: Path) -> dict[int, str]:
    """Token ids a mask token must not reuse, each named by where it was found."""
    reserved: dict[int, str] = {}
    for filename in ("config.json", "generation_config.json"):
        config = read_json(target_dir / filename)
        for source in (config, config.get("text_config")):
            if not isinstance(source, dict):
                continue
            for key in _ID_KEYS:
                for token in _int_ids(source.get(key)):
                    reserved.setdefault(token, f"{filename} {key}")
    by_content, special = token_table(target_dir)
    tokenizer = read_json(target_dir / "tokenizer_config.json")
    for filename, config in (
        ("tokenizer_config.json", tokenizer),
        ("special_tokens_map.json", read_json(target_dir / "special_tokens_map.json")),
    ):
        named = [(key, _content(config.get(key))) for key in _SPECIAL_KEYS]
        extra = config.get("additional_special_tokens")
        named += [("additional_special_tokens", _content(v)) for v in extra or []
                  if isinstance(extra, list) and not _is_mask(_content(v))]
        for key, content in named:
            if content in by_content:
                reserved.setdefault(by_content[content], f"{filename} {key} {content!r}")
    for text in _template_sources(target_dir, tokenizer):
        for control in set(_CONTROL_TOKEN.findall(text)):
            if control in by_content and not _is_mask(control):
                reserved.setdefault(by_content[control], f"chat template control token {control!r}")
    for content, token_id in by_content.items():
        if token_id in special and not _is_mask(content) and not _FREE_RESERVED.fullmatch(content):
            reserved.setdefault(token_id, f"special token {content!r}")
    return reserved


def _template_sources(folder: Path, tokenizer: dict[str, Any]) -> list[str]:
    from dflash_guard.templates.locate import read_jinja, template_files, templates_in_config

    sources = [text for _, text in templates_in_config(tokenizer)]
    sources += [text for _, text in templates_in_config(read_json(folder / "chat_template.json"))]
    for jinja in template_files(folder).values():  # additional_chat_templates/ included
        # an unreadable template is reported by the template detector
        with contextlib.suppress(OSError, ValueError):
            sources.append(read_jinja(jinja))
    return sources
