"""Prompt sets: the one JSONL reader shared by the reference server and dflash-guard's diff tests.

Torch-free on purpose (the CLI shows defaults and reads prompt files without loading torch), and
free of dflash_guard imports (kernels_ref stands alone): problems raise `PromptSetError`, which
callers translate. One object per line:

    {"id": "code-1", "prompt": "def f(x):", "max_new_tokens": 32, "stop": ["\\n", 257]}
    {"id": "ids-1", "prompt_ids": [104, 105]}
    {"id": "chat-1", "messages": [{"role": "user", "content": "Hi"}]}
    {"id": "chat-2", "messages": [...], "tools": [{"type": "function", ...}],
     "chat_template_kwargs": {"enable_thinking": false}}

`id` (a unique string) and exactly one of `prompt` (text), `prompt_ids` (token ids) and
`messages` (a conversation, rendered with the target's chat template by dflash-guard, which
checks the template first; this package never renders templates) are required;
`max_new_tokens` (a positive integer) and `stop` (strings or token ids) are optional; any other
field is refused; `tools` (a list of objects) and `chat_template_kwargs` (an object of extra
template variables) go with `messages` only. Every per-line error names `file:line`.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

FIELDS = frozenset({"id", "prompt", "prompt_ids", "messages", "max_new_tokens", "stop", "tools",
                    "chat_template_kwargs"})
CHAT_ONLY = ("tools", "chat_template_kwargs")
SOURCES = ("prompt", "prompt_ids", "messages")


class PromptSetError(ValueError):
    """A prompt file or a prompt that cannot be used (the message names file:line)."""


class Encoder(Protocol):
    """What turning text into ids needs of a tokenizer."""

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class Chat:
    """A conversation: `{"role", "content"}` objects (and any other fields a template reads),
    the tools it may call and extra template variables (e.g. `enable_thinking`)."""

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    template_kwargs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class PromptSpec:
    """One prompt as written in the file: text, token ids or a chat; an own budget, stops."""

    id: str
    prompt: str | tuple[int, ...] | Chat
    max_new_tokens: int | None = None
    stop: tuple[str | int, ...] = ()
    where: str = field(default="", compare=False)  # "file:line", for later error messages


def is_int(value: Any) -> bool:
    """An int that is not a bool (JSON `true` must not pass as token id 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


MAX_PROMPT_FILE_BYTES = 64 * 1024 * 1024
DEFAULT_PROMPTS = Path(__file__).resolve().parent / "prompts" / "default.jsonl"  # the diff tests


def _read_regular_text(path: Path) -> str:
    """The text of a regular file of at most `MAX_PROMPT_FILE_BYTES`: a FIFO or device is
    refused (opened without blocking, checked with `fstat`), never read forever."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError("not a regular file (a FIFO or device is not read)")
        data = handle.read(MAX_PROMPT_FILE_BYTES + 1)
    if len(data) > MAX_PROMPT_FILE_BYTES:
        raise OSError(f"larger than {MAX_PROMPT_FILE_BYTES:,} bytes")
    return data.decode("utf-8")


def read_prompt_set(path: Path) -> list[PromptSpec]:
    """Read and check a JSONL prompt set; raise `PromptSetError` on the first problem."""
    try:
        lines = _read_regular_text(Path(path)).splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptSetError(f"{path}: cannot read the prompt file ({exc})") from None
    prompts = [
        _parse_line(line, f"{path}:{number}")
        for number, line in enumerate(lines, start=1)
        if line.strip()
    ]
    if not prompts:
        raise PromptSetError(f"{path}: no prompts")
    if len({p.id for p in prompts}) != len(prompts):
        raise PromptSetError(f"{path}: prompt ids are not unique")
    return prompts


def _parse_line(line: str, where: str) -> PromptSpec:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PromptSetError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        raise PromptSetError(f"{where}: each line must be an object with a string 'id'")
    unknown = set(row) - FIELDS
    if unknown:
        raise PromptSetError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    if sum(name in row for name in SOURCES) != 1:
        raise PromptSetError(f"{where}: give exactly one of 'prompt', 'prompt_ids' and 'messages'")
    prompt: str | tuple[int, ...] | Chat
    if "messages" not in row and any(name in row for name in CHAT_ONLY):
        raise PromptSetError(f"{where}: 'tools' and 'chat_template_kwargs' go with 'messages'")
    if "messages" in row:
        prompt = _chat(row, where)
    elif "prompt" in row:
        if not isinstance(row["prompt"], str):
            raise PromptSetError(f"{where}: 'prompt' must be a string")
        prompt = row["prompt"]
    else:
        ids = row["prompt_ids"]
        if not isinstance(ids, list) or not all(is_int(i) for i in ids):
            raise PromptSetError(f"{where}: 'prompt_ids' must be a list of integers")
        prompt = tuple(ids)
    if not prompt:
        raise PromptSetError(f"{where}: the prompt is empty")
    budget = row.get("max_new_tokens")
    if budget is not None and (not is_int(budget) or budget < 1):
        raise PromptSetError(f"{where}: 'max_new_tokens' must be a positive integer")
    stop = row.get("stop", [])
    if not isinstance(stop, list) or not all(isinstance(s, str) or is_int(s) for s in stop):
        raise PromptSetError(f"{where}: 'stop' must be a list of strings or token ids")
    return PromptSpec(row["id"], prompt, budget, tuple(stop), where)


def _chat(row: dict[str, Any], where: str) -> Chat:
    messages, tools = row["messages"], row.get("tools", [])
    kwargs = row.get("chat_template_kwargs", {})
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise PromptSetError(f"{where}: 'tools' must be a list of objects")
    if not isinstance(kwargs, dict):
        raise PromptSetError(f"{where}: 'chat_template_kwargs' must be an object")
    if not isinstance(messages, list) or not messages or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        raise PromptSetError(
            f"{where}: 'messages' must be a non-empty list of objects with string 'role' and "
            "'content'"
        )
    return Chat(tuple(messages), tuple(tools), tuple(sorted(kwargs.items())))


def prompt_token_ids(
    prompt: str | Sequence[int] | Chat, tokenizer: Encoder | None, vocab_size: int
) -> tuple[int, ...]:
    """The prompt's token ids: text encoded by `tokenizer`, ids checked against the vocabulary.

    A `Chat` must have been rendered and tokenized by the caller (dflash-guard does it).
    """
    if isinstance(prompt, Chat):
        raise PromptSetError("a 'messages' prompt needs its chat template rendered first")
    if isinstance(prompt, str):
        if tokenizer is None:
            raise PromptSetError(
                "text prompts need the target's tokenizer.json; give 'prompt_ids' for this target"
            )
        ids = tuple(tokenizer.encode(prompt))
    else:
        ids = tuple(prompt)
    if not ids or not all(is_int(i) and 0 <= i < vocab_size for i in ids):
        raise PromptSetError("the prompt is empty or has ids outside the vocabulary")
    return ids
