"""Text prompts through the target's own `tokenizer.json`, with Hugging Face `tokenizers`.

`load_tokenizer` reads any target's `tokenizer.json` plus the `add_bos_token` / `add_eos_token`
flags of its `tokenizer_config.json`, so text is encoded as transformers encodes it (the file's
post-processor, added and special tokens matched in the text). The built-in pair's byte-level
vocabulary is an ordinary `tokenizers` file too (a BPE model with no merges over the GPT-2 byte
alphabet, so id b is byte b): `tokenizer_json` writes it, and it is read like any other.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from kernels_ref.checkpoint import read_json
from kernels_ref.errors import RunnerError


@functools.cache
def byte_alphabet() -> tuple[str, ...]:
    """GPT-2's printable stand-in character for each byte 0..255."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return tuple(chars[b] for b in range(256))


@dataclass(frozen=True)
class Tokenizer:
    """A target's `tokenizers` tokenizer and its BOS/EOS rules from `tokenizer_config.json`.

    `add_bos` / `add_eos`: True adds the token when the post-processor did not, False removes
    one it added, None leaves the post-processor's choice (transformers' behaviour).
    """

    backend: HFTokenizer
    bos_id: int | None = None
    eos_id: int | None = None
    add_bos: bool | None = None
    add_eos: bool | None = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; a rendered chat prompt passes `add_special_tokens=False`
        (its template writes the special tokens itself, as `apply_chat_template` does)."""
        ids = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        if not add_special_tokens:
            return ids
        if self.bos_id is not None and self.add_bos is not None:
            has = bool(ids) and ids[0] == self.bos_id
            if self.add_bos and not has:
                ids = [self.bos_id, *ids]
            elif not self.add_bos and has:
                ids = ids[1:]
        if self.eos_id is not None and self.add_eos is not None:
            has = bool(ids) and ids[-1] == self.eos_id
            if self.add_eos and not has:
                ids = [*ids, self.eos_id]
            elif not self.add_eos and has:
                ids = ids[:-1]
        return ids

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`, special tokens included; an id outside the vocabulary becomes
        `<|id:N|>`."""
        pieces: list[str] = []
        run: list[int] = []
        for token in [*ids, None]:
            if token is not None and token >= 0 and self.backend.id_to_token(token) is not None:
                run.append(token)
                continue
            if run:
                pieces.append(self.backend.decode(run, skip_special_tokens=False))
                run = []
            if token is not None:
                pieces.append(f"<|id:{token}|>")
        return "".join(pieces)

    def decode_bytes(self, ids: list[int]) -> bytes:
        """`decode(ids)` as UTF-8 bytes."""
        return self.decode(ids).encode("utf-8")

    def token_id(self, text: str) -> int | None:
        """The id of `text` if it is exactly one token (a special's name, or text that encodes
        to a single id), else None."""
        ids = self.backend.encode(text, add_special_tokens=False).ids
        return ids[0] if len(ids) == 1 else None


def tokenizer_json(specials: dict[int, str]) -> dict[str, Any]:
    """The HF `tokenizers` JSON of the byte-level vocabulary with `specials` as added tokens."""
    added = [
        {
            "content": name,
            "id": token_id,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token_id, name in sorted(specials.items())
    ]
    byte_level = {
        "add_prefix_space": False,
        "trim_offsets": True,
        "type": "ByteLevel",
        "use_regex": False,
    }
    return {
        "added_tokens": added,
        "decoder": byte_level,
        "normalizer": None,
        "padding": None,
        "post_processor": None,
        "pre_tokenizer": byte_level,
        "truncation": None,
        "version": "1.0",
        "model": {
            "byte_fallback": False,
            "continuing_subword_prefix": None,
            "dropout": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "ignore_merges": False,
            "merges": [],
            "type": "BPE",
            "unk_token": None,
            "vocab": {char: b for b, char in enumerate(byte_alphabet())},
        },
    }


def _special_id(backend: HFTokenizer, value: Any) -> int | None:
    """The id of a `tokenizer_config.json` special token (a string or an AddedToken object)."""
    if isinstance(value, dict):
        value = value.get("content")
    return backend.token_to_id(value) if isinstance(value, str) else None


def _flag(config: dict[str, Any], name: str, path: Path) -> bool | None:
    value = config.get(name)
    if value is not None and not isinstance(value, bool):
        raise RunnerError(f"{path}: {name!r} must be true or false")
    return value


def load_tokenizer(folder: Path) -> Tokenizer | None:
    """The folder's tokenizer (`tokenizer.json` with `tokenizer_config.json`), None without one."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        backend = HFTokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the Rust library raises bare Exception
        raise RunnerError(f"{path}: not a tokenizers file ({exc})") from None
    config_path = folder / "tokenizer_config.json"
    config = read_json(config_path) if config_path.is_file() else {}
    return Tokenizer(
        backend,
        bos_id=_special_id(backend, config.get("bos_token")),
        eos_id=_special_id(backend, config.get("eos_token")),
        add_bos=_flag(config, "add_bos_token", config_path),
        add_eos=_flag(config, "add_eos_token", config_path),
    )
