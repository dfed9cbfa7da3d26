"""Parsing the JSON a scan meets (configs, shard indexes, safetensors headers) without crashing.

`json` recurses once per nesting level, so `[[[[...` a few thousand deep raises `RecursionError`,
and a multi-gigabyte `config.json` would be read whole: both are turned into `ValueError`, the
error every caller already reports as a finding.
"""

from __future__ import annotations

import json
from pathlib import Path

from dflash_guard.fileio import MAX_JSON_BYTES as MAX_JSON_BYTES  # its cap, named in fileio
from dflash_guard.scan.regular import read_regular


class DuplicateKey(ValueError):
    """A JSON object repeats a key (two parsers could read two different documents)."""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: set[str] = set()
    for key, _ in pairs:  # linear: `keys.count` per key was quadratic on a hostile header
        if key in seen:
            raise DuplicateKey(f"duplicate JSON key {key!r}")
        seen.add(key)
    return dict(pairs)


def loads(text: str | bytes, *, strict: bool = False) -> object:
    """`json.loads` raising only `ValueError` on bad input; `strict` also refuses duplicate keys
    at any depth (`DuplicateKey`)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates if strict else None)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None


def read(path: Path, *, strict: bool = False) -> object:
    """The JSON document in `path`: `OSError` if unreadable or not a regular file (a FIFO is
    never opened blocking), `ValueError` if it is not UTF-8 JSON or has over `MAX_JSON_BYTES`."""
    return loads(read_regular(path, MAX_JSON_BYTES).decode("utf-8"), strict=strict)
