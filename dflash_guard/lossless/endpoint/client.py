"""The HTTP side of the endpoint diff: a small `/v1/completions` client and its URL handling.

A `messages` prompt goes to `/v1/chat/completions` instead (the engine renders its own chat
template); `parse_chat_completion` reads the answer into the same `Completion`.

Greedy requests with logprobs (and vLLM's token-id fields when enabled), bounded retries on
429/503, an API key that travels only in the `Authorization` header and never reaches a message,
and URLs shown without credentials. `parse_completion` normalises what vLLM, SGLang and plain
OpenAI-compatible servers answer into one `Completion` (with llama.cpp's per-response draft
counts, `timings.draft_n` / `draft_n_accepted`, when present). ollama (port 11434) answers both
endpoints with chat-style `logprobs.content` entries of token text, logprob and bytes, no ids
(its `openai/openai.go`), read as vLLM's are; it ignores the token-id fields.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx2

from dflash_guard.errors import Error, InputError
from dflash_guard.lossless.defaults import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S
from dflash_guard.lossless.result import Token
from dflash_guard.urls import http_endpoint
from kernels_ref.prompts import Chat, PromptSpec

DEFAULT_TOP_LOGPROBS = 5  # the most the OpenAI completions API allows
RETRY_STATUSES = frozenset({429, 503})
TOKEN_ID_PREFIX = "token_id:"


class EndpointError(Error):
    """An endpoint was unreachable, timed out, refused the request or answered malformed data."""


@dataclass(frozen=True)
class TokenLogprobs:
    """What an engine reported at one position it committed, parsed once from its answer."""

    logprob: float | None = None  # the committed token's; None: not reported
    top: tuple[tuple[Token, float], ...] = ()  # its top-k alternatives, best first

    @property
    def margin(self) -> float | None:
        """Its top-1 minus top-2 logprob (None: fewer than two alternatives reported)."""
        return self.top[0][1] - self.top[1][1] if len(self.top) >= 2 else None

    @property
    def runner_up(self) -> Token | None:
        return self.top[1][0] if len(self.top) >= 2 else None


NOT_REPORTED = TokenLogprobs()


@dataclass(frozen=True)
class Completion:
    """What one endpoint generated for one prompt, normalised across engines."""

    text: str
    token_ids: tuple[int, ...] | None  # when the server reported ids
    token_texts: tuple[str, ...] | None  # the logprob token strings, when reported
    logprobs: tuple[TokenLogprobs, ...]  # per position (`at`)
    finish_reason: str | None
    drafts: tuple[int, int] | None = None  # llama.cpp's timings: (draft_n, draft_n_accepted)

    def at(self, position: int) -> TokenLogprobs:
        """The logprobs reported at `position` (`NOT_REPORTED` past those reported)."""
        return self.logprobs[position] if 0 <= position < len(self.logprobs) else NOT_REPORTED


def read_api_key(env_var: str | None) -> str | None:
    """The API key held in environment variable `env_var` (None when no variable is named)."""
    if not env_var:
        return None
    key = os.environ.get(env_var, "")
    if not key.strip():
        raise InputError(f"--api-key-env names {env_var}, but that variable is unset or empty")
    return key.strip()


def http_url_parts(url: str) -> SplitResult:
    """`url` split and normalised by `urls.http_endpoint`, the one check of endpoint URLs."""
    try:
        return http_endpoint(url, redact_url(url))
    except InputError as error:
        raise InputError(f"not an http(s) URL without credentials: {error}") from None


def completions_url(base: str) -> str:
    """`http://h:8000`, `http://h:8000/v1` or the full URL -> `.../v1/completions`."""
    parts = http_url_parts(base)
    path = parts.path.rstrip("/")
    if path.endswith("/completions"):
        return base
    if not path.endswith("/v1"):
        path += "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path + "/completions", "", ""))


def redact_url(url: str) -> str:
    """The URL without user:password and query (credentials never reach a report)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(malformed URL)"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# --------------------------------------------------------------------------- client


class CompletionClient:
    """A small `/v1/completions` client: greedy, with logprobs, bounded retries on 429/503.

    Thread-safe (one `httpx2.Client` shared by the worker threads). The API key travels only
    in the `Authorization` header; every message this client raises is scrubbed of it.
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        token_ids: bool = True,
        top_logprobs: int = DEFAULT_TOP_LOGPROBS,
        pool_size: int = 8,
    ) -> None:
        self.name = name
        self.url = completions_url(base_url)
        self.shown_url = redact_url(self.url)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.token_ids = token_ids
        self.top_logprobs = top_logprobs
        self._secret = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx2.Client(
            headers=headers,
            timeout=httpx2.Timeout(timeout),
            limits=httpx2.Limits(max_connections=pool_size, max_keepalive_connections=pool_size),
            follow_redirects=False,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CompletionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fail(self, message: str, url: str | None = None) -> EndpointError:
        if self._secret:
            message = message.replace(self._secret, "***")
        shown = redact_url(url) if url else self.shown_url
        return EndpointError(f"{self.name} endpoint {shown}: {message}")

    def _send(self, method: str, url: str, body: dict[str, Any] | None) -> Answer:
        """Send one request, retrying 429/503 with exponential backoff (or `Retry-After`); the
        answer is read whole within `timeout` seconds overall and `MAX_BODY_BYTES` (a server
        dripping a byte at a time, or sending gigabytes, is an `EndpointError`)."""
        delay = self.backoff
        for attempt in range(self.retries + 1):
            deadline = time.monotonic() + self.timeout
            try:
                with self._http.stream(method, url, json=body) as response:
                    answer = Answer(response.status_code, dict(response.headers),
                                    self._bounded_body(response, url, deadline))
            except httpx2.TimeoutException:
                raise self._fail(f"no answer within {self.timeout:g} s", url) from None
            except httpx2.TransportError as error:
                raise self._fail(f"unreachable ({type(error).__name__}: {error})", url) from None
            if answer.status_code not in RETRY_STATUSES or attempt == self.retries:
                return answer
            time.sleep(min(self.max_backoff, _retry_after(answer.headers) or delay))
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns

    def _bounded_body(self, response: httpx2.Response, url: str, deadline: float) -> bytes:
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise self._fail(f"answered more than {MAX_BODY_BYTES:,} bytes", url)
            if time.monotonic() > deadline:
                raise self._fail(f"no complete answer within {self.timeout:g} s", url)
            chunks.append(chunk)
        return b"".join(chunks)

    def request_json(self, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
        """Send a request and return its JSON body; any failure is an `EndpointError`."""
        response = self._send(method, url, body)
        status = response.status_code
        if status in (401, 403):
            raise self._fail(f"refused the credentials (HTTP {status})", url)
        if status >= 400:
            hint = ""
            if status in (400, 422) and self.token_ids:
                hint = " (if it rejects the token-id fields, retry with --no-token-ids)"
            snippet = response.text[:200].replace("\n", " ")
            raise self._fail(f"HTTP {status}: {snippet}{hint}", url)
        try:
            return json.loads(response.body)
        except RecursionError:  # parse depth is bounded by the interpreter's recursion limit
            raise self._fail("answered JSON nested too deeply to parse", url) from None
        except ValueError:  # malformed JSON, not UTF-8, an integer past the digit limit
            raise self._fail(f"answered malformed JSON: {response.text[:80]!r}", url) from None

    def get_text(self, url: str) -> str:
        """GET `url` (same credentials, timeout and retries) and return the body as text."""
        response = self._send("GET", url, None)
        if response.status_code != 200:
            raise self._fail(f"HTTP {response.status_code}", url)
        return response.text

    def first_model(self) -> str:
        """The first model the server lists on `/v1/models` (both vLLM and SGLang serve it)."""
        url = self.url.rsplit("/completions", 1)[0] + "/models"
        payload = self.request_json("GET", url)
        try:
            return str(payload["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise self._fail("`/v1/models` lists no model; pass --model") from None

    def completion_request(self, prompt: PromptSpec, *, model: str, max_tokens: int
                           ) -> tuple[str, dict[str, Any]]:
        """The URL and JSON body `complete` sends for `prompt`: greedy, with logprobs (and token
        ids when enabled); `max_tokens` caps the prompt's own budget; a chat goes to
        `/v1/chat/completions`."""
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": min(prompt.max_new_tokens or max_tokens, max_tokens),
            "temperature": 0,
            "n": 1,
            "stream": False,
        }
        chat = prompt.prompt if isinstance(prompt.prompt, Chat) else None
        if chat is not None:
            body.update(messages=list(chat.messages), logprobs=True,
                        top_logprobs=self.top_logprobs)
            if chat.tools:  # rendered into the prompt; "none": the answer is not parsed as calls
                body.update(tools=list(chat.tools), tool_choice="none")
            if chat.template_kwargs:
                body["chat_template_kwargs"] = dict(chat.template_kwargs)
        else:
            body.update(prompt=list(prompt.prompt) if isinstance(prompt.prompt, tuple)
                        else prompt.prompt, logprobs=self.top_logprobs)
        words = [s for s in prompt.stop if isinstance(s, str)]
        ids = [s for s in prompt.stop if not isinstance(s, str)]
        if words:
            body["stop"] = words
        if ids:
            body["stop_token_ids"] = ids  # a vLLM and SGLang extension
        if self.token_ids:
            body["return_token_ids"] = True  # vLLM >= 0.10.2: choices[].token_ids
            body["return_tokens_as_token_ids"] = True  # vLLM: logprob tokens as "token_id:N"
            # llama.cpp: every generated id in `__verbose.tokens` (its logprobs leave out tokens
            # that end inside a UTF-8 character)
            body.update(return_tokens=True, verbose=True, response_fields=["tokens"])
        url = self.url.rsplit("/completions", 1)[0] + "/chat/completions" if chat else self.url
        return url, body

    def complete(self, prompt: PromptSpec, *, model: str, max_tokens: int) -> Completion:
        """The greedy completion of `prompt` (`completion_request`'s request), parsed."""
        url, body = self.completion_request(prompt, model=model, max_tokens=max_tokens)
        payload = self.request_json("POST", url, body)
        try:
            if isinstance(prompt.prompt, Chat):
                return parse_chat_completion(payload)
            return parse_completion(payload)
        except ValueError as error:
            raise self._fail(f"malformed completion for prompt {prompt.id!r}: {error}") from None

    def stream_events(self, url: str, body: dict[str, Any]) -> Iterator[Any]:
        """POST `body` with `stream: true` and yield the JSON of each server-sent `data:` event
        until `[DONE]` (no retries); a stream not done within `timeout` seconds overall, a line
        over `MAX_LINE_BYTES` or a stream over `MAX_BODY_BYTES` is an `EndpointError`."""
        deadline = time.monotonic() + self.timeout
        try:
            with self._http.stream("POST", url, json={**body, "stream": True}) as response:
                if response.status_code != 200:
                    text = self._bounded_body(response, url, time.monotonic() + self.timeout)
                    snippet = text[:200].decode("utf-8", "replace").replace("\n", " ")
                    raise self._fail(f"HTTP {response.status_code}: {snippet}", url)
                for line in self._lines(response, url, deadline):
                    data = line.removeprefix("data:").strip() if line.startswith("data:") else ""
                    if data == "[DONE]":
                        return
                    if data:
                        try:
                            yield json.loads(data)
                        except (ValueError, RecursionError):
                            raise self._fail(f"streamed malformed JSON: {data[:80]!r}",
                                             url) from None
        except httpx2.TimeoutException:
            raise self._fail(f"no answer within {self.timeout:g} s", url) from None
        except httpx2.TransportError as error:
            raise self._fail(f"unreachable ({type(error).__name__}: {error})", url) from None


    def _lines(self, response: httpx2.Response, url: str, deadline: float) -> Iterator[str]:
        """The text lines of a stream, each at most `MAX_LINE_BYTES`, the whole at most
        `MAX_BODY_BYTES` and done by `deadline`."""
        pending, total = b"", 0
        for chunk in response.iter_bytes():
            if time.monotonic() > deadline:
                raise self._fail(f"stream not done within {self.timeout:g} s", url)
            total += len(chunk)
            if total > MAX_BODY_BYTES:
                raise self._fail(f"streamed more than {MAX_BODY_BYTES:,} bytes", url)
            *lines, pending = (pending + chunk).split(b"\n")
            if len(pending) > MAX_LINE_BYTES:
                raise self._fail(f"streamed a line over {MAX_LINE_BYTES:,} bytes", url)
            for line in lines:
                yield line.decode("utf-8", "replace").rstrip("\r")
        if pending:
            yield pending.decode("utf-8", "replace").rstrip("\r")


@dataclass(frozen=True)
class Answer:
    """An endpoint's whole answer, read within the client's bounds."""

    status_code: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


MAX_BODY_BYTES = 64 * 1024 * 1024  # a completion with logprobs is kilobytes; /metrics too
MAX_LINE_BYTES = 4 * 1024 * 1024  # one server-sent event


def _retry_after(headers: dict[str, str]) -> float | None:
    try:
        value = float(headers.get("retry-after", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _token_key(token: Any) -> Token:
    if isinstance(token, str) and token.startswith(TOKEN_ID_PREFIX):
        tail = token[len(TOKEN_ID_PREFIX) :]
        if tail.lstrip("-").isdigit():
            return int(tail)
    if isinstance(token, bool) or not isinstance(token, int | str):
        raise ValueError(f"token {token!r} is neither text nor an id")
    return token


def parse_completion(payload: Any) -> Completion:
    """Normalise an OpenAI-style completion body; raise ValueError on anything malformed."""
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
        raise ValueError("no `choices` list")
    if not payload["choices"] or not isinstance(payload["choices"][0], dict):
        raise ValueError("empty `choices`")
    choice = payload["choices"][0]
    text = choice.get("text")
    if not isinstance(text, str):
        raise ValueError("`choices[0].text` is not a string")
    logprobs = choice.get("logprobs") or {}
    if not isinstance(logprobs, dict):
        raise ValueError("`logprobs` is not an object")
    content = logprobs.get("content")
    if (isinstance(content, list) and content and _verbose_tokens(payload) is None
            and all(isinstance(e, dict) and "id" not in e for e in content)):
        return _parse_text_entries(text, choice, payload, content)  # ollama: token text, no ids
    if isinstance(content, list) or _verbose_tokens(payload) is not None:
        return _parse_content_logprobs(text, content or [], choice, payload)
    return _parse_token_logprobs(text, choice, payload, logprobs.get("tokens"),
                                 logprobs.get("token_logprobs") or [],
                                 logprobs.get("top_logprobs") or [])


def _parse_token_logprobs(text: str, choice: dict[str, Any], payload: dict[str, Any],
                          raw_tokens: Any, chosen: Any, alternatives: Any) -> Completion:
    """The OpenAI completions shape, as vLLM, SGLang and others write it: per position a
    token (text, or `token_id:N`), its logprob and its alternatives as `{token: logprob}`; the
    ids from `choices[0].token_ids` when sent."""
    keys = [_token_key(t) for t in raw_tokens] if isinstance(raw_tokens, list) else None
    token_ids: tuple[int, ...] | None = None
    token_texts: tuple[str, ...] | None = None
    if isinstance(choice.get("token_ids"), list):
        ids = choice["token_ids"]
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise ValueError("`token_ids` holds a non-integer")
        token_ids = tuple(ids)
    elif keys is not None and keys and all(isinstance(k, int) for k in keys):
        token_ids = tuple(int(k) for k in keys)
    if keys is not None and all(isinstance(k, str) for k in keys):
        token_texts = tuple(str(k) for k in keys)
    if not isinstance(chosen, list):
        raise ValueError("`token_logprobs` is not a list")
    if not isinstance(alternatives, list):
        raise ValueError("`top_logprobs` is not a list")
    tops = [_ranked(entry) for entry in alternatives]
    reason = choice.get("finish_reason")
    drafts = _drafts(payload.get("timings"))
    values = [None if v is None else _number(v) for v in chosen]
    return Completion(text, token_ids, token_texts, _positions(values, tops),
                      reason if reason else None, drafts)


def _ranked(entry: Any) -> tuple[tuple[Token, float], ...]:
    """One position's alternatives, `{token: logprob}`, best first (None: none reported)."""
    if entry is None:
        return ()
    if not isinstance(entry, dict):
        raise ValueError("a `top_logprobs` entry is not an object")
    ranked = [(_token_key(token), _number(value)) for token, value in entry.items()]
    return tuple(sorted(ranked, key=lambda item: -item[1]))


def _positions(chosen: list[float | None], tops: list[tuple[tuple[Token, float], ...]]
               ) -> tuple[TokenLogprobs, ...]:
    """Per position, the committed token's logprob beside its alternatives (either list may
    be the shorter)."""
    return tuple(TokenLogprobs(chosen[i] if i < len(chosen) else None,
                               tops[i] if i < len(tops) else ())
                 for i in range(max(len(chosen), len(tops))))


def parse_chat_completion(payload: Any) -> Completion:
    """A `/v1/chat/completions` body as a `Completion`: the message's content as text, its
    `logprobs.content` entries as llama.cpp (`id`) or vLLM (`token_id:N` tokens, `token_ids`)
    write them; raise ValueError on anything malformed."""
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
        raise ValueError("no `choices` list")
    if not payload["choices"] or not isinstance(payload["choices"][0], dict):
        raise ValueError("empty `choices`")
    choice = payload["choices"][0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise ValueError("`choices[0].message` is not an object")
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise ValueError("`choices[0].message.content` is not a string")
    logprobs = choice.get("logprobs") or {}
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if content is not None and not isinstance(content, list):
        raise ValueError("`logprobs.content` is not a list")
    entries = [e for e in content or [] if isinstance(e, dict)]
    if len(entries) != len(content or []):
        raise ValueError("a `logprobs.content` entry is not an object")
    if not entries or any("id" in e for e in entries) or _verbose_tokens(payload) is not None:
        return _parse_content_logprobs(text, entries, choice, payload)  # llama.cpp: ids
    return _parse_text_entries(text, choice, payload, entries)  # vLLM, ollama: token text


def _parse_text_entries(text: str, choice: dict[str, Any], payload: dict[str, Any],
                        entries: list[Any]) -> Completion:
    """`logprobs.content` entries without ids (vLLM's chat, ollama's both endpoints): per
    position a token, its logprob and its ranked alternatives, read as the completions shape."""
    alternatives = [e.get("top_logprobs") or [] for e in entries]
    if not all(isinstance(a, list) for a in alternatives):
        raise ValueError("`top_logprobs` of a `logprobs.content` entry is not a list")
    if any(isinstance(a, dict) and not isinstance(a.get("token"), str | int | None)
           for ranked in alternatives for a in ranked):
        raise ValueError("a `top_logprobs` token is neither text nor an id")
    tops = [{a.get("token"): a.get("logprob") for a in ranked if isinstance(a, dict)}
            for ranked in alternatives]
    return _parse_token_logprobs(text, choice, payload, [e.get("token") for e in entries],
                                 [e.get("logprob") for e in entries], tops)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"logprob {value!r} is not a number")
    try:
        return float(value)
    except OverflowError:  # an integer past a float's range
        raise ValueError("a logprob is out of range") from None


def _content_id(entry: Any) -> int:
    if not isinstance(entry, dict):
        raise ValueError("a `logprobs.content` entry is not an object")
    token = entry.get("id")
    if isinstance(token, bool) or not isinstance(token, int):
        raise ValueError("a `logprobs.content` entry has no integer `id`")
    return token


def _parse_content_logprobs(
    text: str, content: list[Any], choice: dict[str, Any], payload: dict[str, Any]
) -> Completion:
    """llama.cpp's completions: logprobs as `{"content": [{"id", "token", "logprob",
    "top_logprobs": [{"id", "token", "logprob"}, ...]}, ...]}`, and every generated id in
    `__verbose.tokens` when asked for. The logprobs leave out tokens that end inside a UTF-8
    character, so they are matched to the ids in order (a left-out token has no alternatives)."""
    listed = tuple(_content_id(entry) for entry in content)
    token_ids = _verbose_tokens(payload) or listed
    ranked_by_entry, chosen_by_entry = [], []
    for entry in content:
        value = entry.get("logprob")
        chosen_by_entry.append(None if value is None else _number(value))
        alternatives = entry.get("top_logprobs") or []
        if not isinstance(alternatives, list):
            raise ValueError("`top_logprobs` of a `logprobs.content` entry is not a list")
        ranked = [(_content_id(a), _number(a.get("logprob"))) for a in alternatives]
        ranked.sort(key=lambda item: -item[1])
        ranked_by_entry.append(tuple(ranked))
    tops: list[tuple[tuple[Token, float], ...]] = []
    chosen: list[float | None] = []
    next_entry = 0
    for token in token_ids:
        if next_entry < len(listed) and listed[next_entry] == token:
            tops.append(ranked_by_entry[next_entry])
            chosen.append(chosen_by_entry[next_entry])
            next_entry += 1
        else:
            tops.append(())
            chosen.append(None)
    reason = choice.get("finish_reason")
    return Completion(text, token_ids, None, _positions(chosen, tops),
                      reason if reason else None, _drafts(payload.get("timings")))


def _verbose_tokens(payload: dict[str, Any]) -> tuple[int, ...] | None:
    """llama.cpp's `__verbose.tokens` (asked for with `return_tokens` and `verbose`), if sent."""
    verbose = payload.get("__verbose")
    tokens = verbose.get("tokens") if isinstance(verbose, dict) else None
    if not isinstance(tokens, list) or not tokens:
        return None
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise ValueError("`__verbose.tokens` holds a non-integer")
    return tuple(tokens)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _drafts(timings: Any) -> tuple[int, int] | None:
    """llama.cpp's per-response `timings.draft_n` and `draft_n_accepted`, when it sent both."""
    if not isinstance(timings, dict):
        return None
    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    if not (_is_int(drafted) and _is_int(accepted)):
        return None
    if not 0 <= accepted <= drafted:
        raise ValueError(f"`timings` says {accepted} of {drafted} drafted tokens were accepted")
    return drafted, accepted
