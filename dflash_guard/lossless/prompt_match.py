"""Is the prompt we decode from the prompt the engine decodes from?

A `messages` prompt is rendered twice: by us (the target's chat template through
`lossless.chat`, then its tokenizer) and by the engine (its own template engine and tokenizer).
If the two differ by one id, a reference diff compares different prompts, and a divergence
would be read as an engine bug. So the engine's ids are asked for first and compared; a
difference is a *prompt mismatch before any decoding*, naming the first differing position and
both sides' text there.

How the engine's ids are asked for: llama.cpp (`llama-server --jinja`) renders with
`POST /apply-template` and tokenizes with `POST /tokenize` (`add_special`, `parse_special`: as its
`/v1/chat/completions` tokenizes the rendered prompt); vLLM renders and tokenizes in one
`POST /tokenize` with `messages` (`add_generation_prompt`, `tools`, `chat_template_kwargs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dflash_guard.lossless.endpoint.client import CompletionClient, EndpointError
from kernels_ref.prompts import Chat

CONTEXT = 4  # tokens of text shown on each side from the first difference
# Text whose ids depend on every part of a BPE tokenizer (split pattern, merges, ignore_merges,
# byte fallback): whitespace runs, digits, contractions, accents, CJK, emoji, code.
PROBES = (
    "Hello world", " Hello  World\t\n\n  end", "3333333 1,234.5", "I'm don't WE'LL 've",
    "Cửa Việt ÁÉÍ", "ied 4 ½ months", "Führer Ελληνικά Русский", "你好，世界 こんにちは 안녕",
    "🦙🦙 ❤️ 🚀", "def f(x):\n    return x**2  # ok", "   \n\n\t\t  ", "<|im_start|>user",
)


@dataclass(frozen=True)
class PromptMismatch:
    """Where our prompt ids and the engine's first differ."""

    prompt_id: str
    position: int
    ours: str  # our text from `position` on (a few tokens)
    engine: str
    our_length: int
    engine_length: int

    def message(self) -> str:
        return (f"prompt mismatch before any decoding: prompt {self.prompt_id!r} differs at token "
                f"{self.position} (ours {self.our_length} ids, the engine's "
                f"{self.engine_length}): ours {self.ours!r}, the engine's {self.engine!r}")


def first_mismatch(prompt_id: str, ours: Sequence[int], engine: Sequence[int],
                   decode: Callable[[list[int]], str]) -> PromptMismatch | None:
    """The first position where `ours` and `engine` differ (None when equal), with the text
    of a few tokens from there on each side."""
    if list(ours) == list(engine):
        return None
    position = next((i for i, (a, b) in enumerate(zip(ours, engine, strict=False)) if a != b),
                    min(len(ours), len(engine)))
    return PromptMismatch(prompt_id, position,
                          decode(list(ours[position:position + CONTEXT])),
                          decode(list(engine[position:position + CONTEXT])),
                          len(ours), len(engine))


def _server_url(client: CompletionClient, path: str) -> str:
    parts = urlsplit(client.url)
    root = parts.path.rsplit("/v1/", 1)[0] if "/v1/" in parts.path else ""
    return urlunsplit((parts.scheme, parts.netloc, root + path, "", ""))


def _ids(payload: Any, key: str, where: str) -> list[int]:
    values = payload.get(key) if isinstance(payload, dict) else None
    if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise EndpointError(f"{where} answered no `{key}` list of token ids")
    return values


def _is_llamacpp(client: CompletionClient) -> bool:
    """llama.cpp answers `GET /props`; vLLM does not have it."""
    try:
        client.request_json("GET", _server_url(client, "/props"))
    except EndpointError as error:
        if "HTTP 404" in str(error):
            return False
        raise
    return True


def engine_text_ids(client: CompletionClient, text: str) -> list[int]:
    """The engine's ids of plain `text` (no special tokens added)."""
    tokenize = _server_url(client, "/tokenize")
    if _is_llamacpp(client):
        body: dict[str, Any] = {"content": text, "add_special": False, "parse_special": True}
    else:
        body = {"prompt": text, "add_special_tokens": False}
    return _ids(client.request_json("POST", tokenize, body), "tokens", tokenize)


def engine_tokenizer_mismatch(client: CompletionClient, encode: Callable[[str], list[int]],
                       texts: Sequence[str] = PROBES) -> str | None:
    """Why the engine's tokenizer is not ours (the first probe text they encode differently),
    None when they agree on every one."""
    for text in texts:
        ours, theirs = encode(text), engine_text_ids(client, text)
        if ours != theirs:
            return (f"the engine's tokenizer is not the target's: {text!r} is {theirs} there, "
                    f"{ours} here")
    return None


def engine_prompt_ids(client: CompletionClient, chat: Chat) -> list[int]:
    """The ids the engine behind `client` decodes `chat` from (llama.cpp, else vLLM)."""
    request: dict[str, Any] = {"messages": list(chat.messages)}
    if chat.tools:  # as the chat diff sends them
        request.update(tools=list(chat.tools), tool_choice="none")
    if chat.template_kwargs:
        request["chat_template_kwargs"] = dict(chat.template_kwargs)
    apply = _server_url(client, "/apply-template")
    try:
        rendered = client.request_json("POST", apply, request)
    except EndpointError as error:
        if "HTTP 404" not in str(error):
            raise
    else:
        prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
        if not isinstance(prompt, str):
            raise EndpointError(f"{apply} answered no `prompt` string")
        tokenize = _server_url(client, "/tokenize")
        payload = client.request_json("POST", tokenize, {
            "content": prompt, "add_special": True, "parse_special": True})
        return _ids(payload, "tokens", tokenize)
    tokenize = _server_url(client, "/tokenize")
    payload = client.request_json("POST", tokenize, {
        **request, "add_generation_prompt": True, "add_special_tokens": False})
    return _ids(payload, "tokens", tokenize)
