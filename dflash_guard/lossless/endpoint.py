"""Diff-test two live OpenAI-compatible engines: a baseline (no speculation) against a candidate.

Both endpoints get the same prompts through `/v1/completions` at temperature 0 with `logprobs`;
the generated tokens are compared one prompt at a time. Token ids are compared when the server
offers them (vLLM: `return_token_ids` gives `choices[].token_ids`, `return_tokens_as_token_ids`
writes logprob tokens as `token_id:N`), otherwise the token strings, otherwise the text.

On the first differing token the baseline's `top_logprobs` give the margin between its two best
candidates: when that margin is under a threshold and the candidate picked the baseline's runner-up,
the divergence is a `near-tie` (a bf16 verify kernel may flip it; reported and counted, a policy
decides); any other divergence is `hard` (a logic bug until shown otherwise).

Optionally the candidate's Prometheus `/metrics` are read before and after the run to report the
speculative-decoding acceptance it achieved (vLLM counters or SGLang's acceptance-length gauge).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx2

from dflash_guard.errors import Error, InputError

DEFAULT_NEAR_TIE_MARGIN = 0.05  # nats: |logprob(top1) - logprob(top2)| below this is a near-tie
DEFAULT_TOP_LOGPROBS = 5  # the most the OpenAI completions API allows
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_RETRIES = 4
RETRY_STATUSES = frozenset({429, 503})
TOKEN_ID_PREFIX = "token_id:"

Token = int | str


class EndpointError(Error):
    """An endpoint was unreachable, timed out, refused the request or answered malformed data."""


@dataclass(frozen=True)
class EndpointPrompt:
    """One prompt to send: text, or a list of token ids (the OpenAI API accepts both)."""

    id: str
    prompt: str | tuple[int, ...]
    max_new_tokens: int | None = None
    stop: tuple[str | int, ...] = ()  # strings go out as `stop`, ids as `stop_token_ids`


@dataclass(frozen=True)
class Completion:
    """What one endpoint generated for one prompt, normalised across engines."""

    text: str
    token_ids: tuple[int, ...] | None  # when the server reported ids
    token_texts: tuple[str, ...] | None  # the logprob token strings, when reported
    top_logprobs: tuple[tuple[tuple[Token, float], ...], ...]  # per position, best first
    finish_reason: str | None


@dataclass(frozen=True)
class PromptResult:
    """The comparison of one prompt's two completions."""

    prompt_id: str
    status: str  # "identical" | "near-tie" | "hard"
    compared_by: str  # "token_ids" | "token_texts" | "text"
    position: int | None  # first differing token (or character, when compared by text)
    baseline_token: Token | None  # None: the completion had ended there
    candidate_token: Token | None
    margin: float | None  # baseline top-1 minus top-2 logprob at `position`, in nats
    candidate_margin: float | None
    baseline_length: int
    candidate_length: int
    detail: str = ""


@dataclass(frozen=True)
class AcceptanceFigures:
    """Speculative-decoding acceptance the candidate reported on its metrics endpoint."""

    source: str  # "vllm" (counter deltas over this run) | "sglang" (gauge after the run)
    mean_acceptance_length: float | None  # tokens committed per target forward (tau)
    acceptance_rate: float | None  # accepted draft tokens / drafted tokens
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None


@dataclass(frozen=True)
class EndpointDiffReport:
    """The verdict of an endpoint diff: hard divergences fail, near-ties are counted."""

    baseline: str
    candidate: str
    near_tie_margin: float
    results: tuple[PromptResult, ...]
    acceptance: AcceptanceFigures | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def identical(self) -> bool:
        """Every prompt gave the same tokens on both endpoints."""
        return all(r.status == "identical" for r in self.results)

    @property
    def hard_divergences(self) -> tuple[PromptResult, ...]:
        return tuple(r for r in self.results if r.status == "hard")

    @property
    def near_ties(self) -> tuple[PromptResult, ...]:
        return tuple(r for r in self.results if r.status == "near-tie")

    @property
    def passed(self) -> bool:
        """No hard divergence (near-ties are left to the policy)."""
        return not self.hard_divergences

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": "endpoint",
            "baseline": self.baseline,
            "candidate": self.candidate,
            "identical": self.identical,
            "passed": self.passed,
            "prompts": len(self.results),
            "hard": len(self.hard_divergences),
            "near_ties": len(self.near_ties),
            "near_tie_margin": self.near_tie_margin,
            "results": [asdict(r) for r in self.results],
            "acceptance": asdict(self.acceptance) if self.acceptance else None,
            "warnings": list(self.warnings),
        }


# --------------------------------------------------------------------------- inputs


def read_api_key(env_var: str | None) -> str | None:
    """The API key held in environment variable `env_var` (None when no variable is named)."""
    if not env_var:
        return None
    key = os.environ.get(env_var, "")
    if not key.strip():
        raise InputError(f"--api-key-env names {env_var}, but that variable is unset or empty")
    return key.strip()


def load_prompts(path: Path) -> list[EndpointPrompt]:
    """Read a JSONL prompt file: one object per line with `prompt` (text or token ids) or `text`
    or `prompt_ids`, and optional `id` and `max_new_tokens`."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read prompt file {path}: {error}") from None
    prompts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{path}:{number}: not JSON ({error.msg})") from None
        prompts.append(_prompt_from_record(record, f"{path}:{number}", default_id=str(number)))
    if not prompts:
        raise InputError(f"{path}: no prompts")
    return prompts


def _prompt_from_record(record: Any, where: str, default_id: str) -> EndpointPrompt:
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object")
    value = next((record[k] for k in ("prompt", "text", "prompt_ids") if k in record), None)
    if isinstance(value, list) and value and all(isinstance(t, int) for t in value):
        prompt: str | tuple[int, ...] = tuple(value)
    elif isinstance(value, str) and value:
        prompt = value
    else:
        raise InputError(f"{where}: needs a non-empty `prompt` (text or a list of token ids)")
    limit = record.get("max_new_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise InputError(f"{where}: `max_new_tokens` must be a positive integer")
    stop = record.get("stop", [])
    if not isinstance(stop, list) or not all(isinstance(s, str | int) for s in stop):
        raise InputError(f"{where}: `stop` must be a list of strings or token ids")
    return EndpointPrompt(str(record.get("id", default_id)), prompt, limit, tuple(stop))


def http_url_parts(url: str) -> SplitResult:
    """`url` split, raising `InputError` unless it is a well-formed http(s) URL."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"not an http(s) URL: {redact_url(url)}")
    return parts


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

    def _send(self, method: str, url: str, body: dict[str, Any] | None) -> httpx2.Response:
        """Send one request, retrying 429/503 with exponential backoff (or `Retry-After`)."""
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(method, url, json=body)
            except httpx2.TimeoutException:
                raise self._fail(f"no answer within {self.timeout:g} s", url) from None
            except httpx2.TransportError as error:
                raise self._fail(f"unreachable ({type(error).__name__}: {error})", url) from None
            if response.status_code not in RETRY_STATUSES or attempt == self.retries:
                return response
            time.sleep(min(self.max_backoff, _retry_after(response) or delay))
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns

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
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
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

    def complete(self, prompt: EndpointPrompt, *, model: str, max_tokens: int) -> Completion:
        """Greedy completion of `prompt` with logprobs (and token ids when enabled); `max_tokens`
        caps the prompt's own budget."""
        body: dict[str, Any] = {
            "model": model,
            "prompt": list(prompt.prompt) if isinstance(prompt.prompt, tuple) else prompt.prompt,
            "max_tokens": min(prompt.max_new_tokens or max_tokens, max_tokens),
            "temperature": 0,
            "n": 1,
            "stream": False,
            "logprobs": self.top_logprobs,
        }
        words = [s for s in prompt.stop if isinstance(s, str)]
        ids = [s for s in prompt.stop if not isinstance(s, str)]
        if words:
            body["stop"] = words
        if ids:
            body["stop_token_ids"] = ids  # a vLLM and SGLang extension
        if self.token_ids:
            body["return_token_ids"] = True  # vLLM >= 0.10.2: choices[].token_ids
            body["return_tokens_as_token_ids"] = True  # vLLM: logprob tokens as "token_id:N"
        payload = self.request_json("POST", self.url, body)
        try:
            return parse_completion(payload)
        except ValueError as error:
            raise self._fail(f"malformed completion for prompt {prompt.id!r}: {error}") from None


def _retry_after(response: httpx2.Response) -> float | None:
    try:
        value = float(response.headers.get("retry-after", ""))
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

    raw_tokens = logprobs.get("tokens")
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

    tops = []
    for entry in logprobs.get("top_logprobs") or []:
        if entry is None:
            tops.append(())
            continue
        if not isinstance(entry, dict):
            raise ValueError("a `top_logprobs` entry is not an object")
        ranked = []
        for token, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"logprob {value!r} is not a number")
            ranked.append((_token_key(token), float(value)))
        ranked.sort(key=lambda item: -item[1])
        tops.append(tuple(ranked))
    reason = choice.get("finish_reason")
    return Completion(text, token_ids, token_texts, tuple(tops), reason if reason else None)


# --------------------------------------------------------------------------- comparison


def _margin(tops: Sequence[tuple[tuple[Token, float], ...]], position: int) -> float | None:
    if position >= len(tops) or len(tops[position]) < 2:
        return None
    return tops[position][0][1] - tops[position][1][1]


def compare_completions(
    prompt_id: str,
    baseline: Completion,
    candidate: Completion,
    *,
    near_tie_margin: float = DEFAULT_NEAR_TIE_MARGIN,
) -> PromptResult:
    """Compare two completions of one prompt; classify the first divergence."""
    if baseline.token_ids is not None and candidate.token_ids is not None:
        by, left, right = "token_ids", baseline.token_ids, candidate.token_ids
    elif baseline.token_texts is not None and candidate.token_texts is not None:
        by, left, right = "token_texts", baseline.token_texts, candidate.token_texts
    else:
        by, left, right = "text", tuple(baseline.text), tuple(candidate.text)

    lengths = {"baseline_length": len(left), "candidate_length": len(right)}
    position = next((i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b), None)
    if position is None and len(left) == len(right):
        if by != "text" and baseline.text != candidate.text:
            return PromptResult(prompt_id, "hard", by, None, None, None, None, None, **lengths,
                                detail="same tokens but different text")
        return PromptResult(prompt_id, "identical", by, None, None, None, None, None, **lengths)
    if position is None:
        position = min(len(left), len(right))
    base_token = left[position] if position < len(left) else None
    cand_token = right[position] if position < len(right) else None
    if by == "text":
        return PromptResult(prompt_id, "hard", by, position, base_token, cand_token, None, None,
                            **lengths, detail="no token logprobs: compared text characters")

    margin = _margin(baseline.top_logprobs, position)
    cand_margin = _margin(candidate.top_logprobs, position)
    runner_up = baseline.top_logprobs[position][1][0] if margin is not None else None
    status, detail = "hard", ""
    if base_token is None or cand_token is None:
        detail = "one completion ended earlier (stop token or length)"
    elif margin is None:
        detail = "baseline gave no top-2 logprobs at the divergence"
    elif margin < near_tie_margin and cand_token == runner_up:
        status = "near-tie"
        detail = f"candidate took the baseline's runner-up at margin {margin:.4f} nats"
    elif margin < near_tie_margin:
        detail = "small margin, but the candidate's token is not the baseline's runner-up"
    return PromptResult(prompt_id, status, by, position, base_token, cand_token, margin,
                        cand_margin, **lengths, detail=detail)


# --------------------------------------------------------------------------- metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?$")
VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"


def parse_prometheus(text: str) -> dict[str, list[float]]:
    """Sample values by metric name (a counter's `_total` suffix dropped), one per label set."""
    samples: dict[str, list[float]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        name = match.group(1).removesuffix("_total")
        samples.setdefault(name, []).append(value)
    return samples


def acceptance_from_metrics(
    before: dict[str, list[float]], after: dict[str, list[float]]
) -> AcceptanceFigures | None:
    """Acceptance over the run: vLLM counter deltas, else SGLang's gauges; None if neither."""
    if VLLM_DRAFTS in after and VLLM_ACCEPTED in after:

        def delta(name: str) -> float:
            return sum(after.get(name, [])) - sum(before.get(name, []))

        drafts, drafted = delta(VLLM_DRAFTS), delta(VLLM_DRAFT_TOKENS)
        accepted = delta(VLLM_ACCEPTED)
        return AcceptanceFigures(
            "vllm",
            1.0 + accepted / drafts if drafts > 0 else None,
            accepted / drafted if drafted > 0 else None,
            drafts,
            drafted,
            accepted,
        )
    if SGLANG_ACCEPT_LENGTH in after:
        lengths, rates = after[SGLANG_ACCEPT_LENGTH], after.get(SGLANG_ACCEPT_RATE)
        return AcceptanceFigures(
            "sglang",
            sum(lengths) / len(lengths),
            sum(rates) / len(rates) if rates else None,
        )
    return None


def acceptance_warnings(figures: AcceptanceFigures | None) -> list[str]:
    """Red flags in the acceptance figures: everything accepted, or acceptance collapsed."""
    if figures is None:
        return ["the metrics endpoint publishes no speculative-decoding counters"]
    warnings = []
    if figures.source == "vllm" and not figures.drafts:
        warnings.append("no drafts were counted during the run: is speculation enabled?")
    if figures.acceptance_rate is not None and figures.acceptance_rate >= 0.999:
        warnings.append("every drafted token was accepted: suspicious (future leakage?)")
    tau = figures.mean_acceptance_length
    if tau is not None and tau < 1.1:
        warnings.append(f"acceptance collapsed (tau {tau:.2f}): mask-token aliasing?")
    return warnings


# --------------------------------------------------------------------------- orchestration


def run_endpoint_diff(
    baseline_url: str,
    candidate_url: str,
    prompts: Iterable[EndpointPrompt],
    *,
    model: str | None = None,
    max_new_tokens: int = 64,
    concurrency: int = 4,
    api_key: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    retries: int = DEFAULT_RETRIES,
    backoff: float = 0.5,
    near_tie_margin: float = DEFAULT_NEAR_TIE_MARGIN,
    metrics_url: str | None = None,
    token_ids: bool = True,
) -> EndpointDiffReport:
    """Send every prompt to both endpoints (at most `concurrency` prompts in flight) and compare.

    Raises `EndpointError` when an endpoint cannot be used (unreachable, timeout, refusal,
    malformed answer); divergences are results, not errors.
    """
    prompts = list(prompts)
    if not prompts:
        raise InputError("no prompts to send")
    if concurrency < 1 or max_new_tokens < 1 or timeout <= 0 or near_tie_margin < 0:
        raise InputError("concurrency, max-new-tokens and timeout must be positive")
    if metrics_url:
        http_url_parts(metrics_url)
    options = dict(api_key=api_key, timeout=timeout, retries=retries, backoff=backoff,
                   token_ids=token_ids, pool_size=concurrency)
    with (
        CompletionClient("baseline", baseline_url, **options) as base,
        CompletionClient("candidate", candidate_url, **options) as cand,
    ):
        base_model = model or base.first_model()
        cand_model = model or cand.first_model()
        before = parse_prometheus(cand.get_text(metrics_url)) if metrics_url else None

        def one(prompt: EndpointPrompt) -> PromptResult:
            left = base.complete(prompt, model=base_model, max_tokens=max_new_tokens)
            right = cand.complete(prompt, model=cand_model, max_tokens=max_new_tokens)
            return compare_completions(prompt.id, left, right, near_tie_margin=near_tie_margin)

        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="endpoint-diff")
        try:
            futures = [pool.submit(one, p) for p in prompts]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f in done and f.exception()), None)
            if failed is not None:
                pool.shutdown(wait=False, cancel_futures=True)
                raise failed.exception()  # type: ignore[misc]
            results = tuple(f.result() for f in futures)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

        acceptance, warnings = None, []
        if before is not None and metrics_url:
            after = parse_prometheus(cand.get_text(metrics_url))
            acceptance = acceptance_from_metrics(before, after)
            warnings = acceptance_warnings(acceptance)
    return EndpointDiffReport(
        redact_url(baseline_url),
        redact_url(candidate_url),
        near_tie_margin,
        results,
        acceptance,
        tuple(warnings),
    )
