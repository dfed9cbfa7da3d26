"""The fixture pair's byte-level tokenizer: ids 0..255 are bytes, special tokens follow.

Its `tokenizer.json` is a valid Hugging Face `tokenizers` file (a BPE model with no merges over the
GPT-2 byte alphabet, so id b is byte b); this module reads and writes that file without the
`tokenizers` package. Other tokenizers are not emulated: give such targets `prompt_ids`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels_ref.checkpoint import read_json


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
class ByteTokenizer:
    """Bytes as ids 0..255 plus named special tokens."""

    specials: dict[int, str]

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode_bytes(self, ids: list[int]) -> bytes:
        """The bytes of `ids`; a special token becomes its name, an unknown id `<|id:N|>`."""
        return b"".join(
            bytes([i]) if 0 <= i < 256 else self.specials.get(i, f"<|id:{i}|>").encode()
            for i in ids
        )

    def decode(self, ids: list[int]) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_id(self, text: str) -> int | None:
        """The id of `text` if it is exactly one token (one byte or a special's name)."""
        for token_id, name in self.specials.items():
            if name == text:
                return token_id
        raw = text.encode("utf-8")
        return raw[0] if len(raw) == 1 else None


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


def load_byte_tokenizer(folder: Path) -> ByteTokenizer | None:
    """The folder's tokenizer if it is this byte-level one, else None (missing or another kind)."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    data = read_json(path)
    model = data.get("model")
    if (
        not isinstance(model, dict)
        or model.get("merges")
        or model.get("vocab") != {char: b for b, char in enumerate(byte_alphabet())}
    ):
        return None
    specials = {
        int(token["id"]): str(token["content"])
        for token in data.get("added_tokens") or []
        if isinstance(token, dict) and isinstance(token.get("id"), int)
    }
    return ByteTokenizer(specials)
