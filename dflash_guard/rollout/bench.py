"""Concurrency-tier benchmark: does speculation still pay at the load the deploy will see?

For each concurrency tier the same request mix goes to the engine without speculation (the
baseline) and with it (the candidate): output tokens per second, request latency p50/p95, and
the candidate's tau over the tier from its Prometheus counters (`endpoint/metrics.py`). The
speedup per tier is candidate tokens/s over baseline tokens/s; the crossover is the first tier
where it falls below 1 (speculation stops paying: "disable it for throughput-shaped traffic").
Requests go through the endpoint diff's client (timeouts, retries on 429/503); each tier is
bounded by `--requests` per endpoint or by `--duration` seconds. With `--stream` the answers are
streamed and the time to the first token (TTFT) is reported too.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.lossless.endpoint.client import EndpointError
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.endpoint.metrics import acceptance_from_metrics, parse_prometheus
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from kernels_ref.prompts import Chat, PromptSpec

DEFAULT_TIERS = (1, 2, 4, 8)
DEFAULT_MAX_TOKENS = 64


@dataclass(frozen=True)
class BenchOptions:
    """Two endpoints, the tiers, the request mix and the budget of each tier."""

    baseline: EngineEndpoint  # the engine without speculation
    candidate: EngineEndpoint  # with it; its metrics URL gives tau per tier
    prompts: tuple[PromptSpec, ...]
    tiers: tuple[int, ...] = DEFAULT_TIERS
    requests: int | None = None  # per tier and endpoint; default: twice the tier, at least 4
    duration_s: float | None = None  # per tier and endpoint, instead of `requests`
    max_tokens: int = DEFAULT_MAX_TOKENS
    stream: bool = False  # stream the answers, to time the first token (TTFT)

    def __post_init__(self) -> None:
        if not self.prompts or not self.tiers or min(self.tiers) < 1 or self.max_tokens < 1:
            raise InputError("bench needs prompts, tiers of at least 1 and a positive budget")
        if (self.requests is not None and self.requests < 1) or (
                self.duration_s is not None and self.duration_s <= 0):
            raise InputError("--requests and --duration must be positive")


@dataclass(frozen=True)
class TierRun:
    """One endpoint at one tier."""

    requests: int
    output_tokens: int
    seconds: float
    tokens_per_s: float
    latency_p50_s: float
    latency_p95_s: float
    ttft_p50_s: float | None = None  # time to first token, when streamed
    ttft_p95_s: float | None = None


@dataclass(frozen=True)
class TierResult:
    """Baseline and candidate at one concurrency tier."""

    concurrency: int
    baseline: TierRun
    candidate: TierRun
    tau: float | None  # the candidate's, over this tier

    @property
    def speedup(self) -> float:
        return self.candidate.tokens_per_s / self.baseline.tokens_per_s \
            if self.baseline.tokens_per_s else 0.0


@dataclass(frozen=True)
class BenchReport:
    """Every tier, in the order run."""

    tiers: tuple[TierResult, ...]

    @property
    def crossover(self) -> int | None:
        """The first tier where speculation is slower than the baseline (None: it always pays)."""
        return next((t.concurrency for t in self.tiers if t.speedup < 1.0), None)

    def speedup_at(self, concurrency: int) -> float | None:
        """The speedup at `concurrency` (None when that tier was not run)."""
        return next((t.speedup for t in self.tiers if t.concurrency == concurrency), None)

    @property
    def passed(self) -> bool:
        """Always: a benchmark measures (the gate's rollout check judges the speedup)."""
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "tiers": [{**asdict(t), "speedup": round(t.speedup, 4)} for t in self.tiers],
            "crossover": self.crossover,
        }


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) of `values`, linearly interpolated (0.0 when empty)."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def parse_tiers(text: str) -> tuple[int, ...]:
    """`"1,2,4,8"` -> `(1, 2, 4, 8)`; `InputError` unless positive, distinct integers."""
    try:
        tiers = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise InputError(f"--concurrency: expected integers like 1,2,4,8, got {text!r}") from None
    if not tiers or min(tiers) < 1 or len(set(tiers)) != len(tiers):
        raise InputError(f"--concurrency: expected distinct integers >= 1, got {text!r}")
    return tiers


class _Endpoint:
    """One server: its client, its model, and one timed request."""

    def __init__(self, name: str, engine: EngineEndpoint, options: BenchOptions) -> None:
        self.client = engine.client(name, pool_size=max(options.tiers))
        self.model = engine.model or self.client.first_model()
        self.max_tokens = options.max_tokens
        self.stream = options.stream

    def request(self, prompt: PromptSpec) -> tuple[float, int, float | None]:
        """Seconds, output tokens and (streamed) seconds to the first token of one greedy
        completion of `prompt`."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt.prompt) if isinstance(prompt.prompt, tuple) else prompt.prompt,
            "max_tokens": min(prompt.max_new_tokens or self.max_tokens, self.max_tokens),
            "temperature": 0,
        }
        started = time.perf_counter()
        if self.stream:
            return self._streamed(body, started)
        payload = self.client.request_json("POST", self.client.url, body)
        seconds = time.perf_counter() - started
        return seconds, self._received_tokens(payload, body["max_tokens"]), None

    def _streamed(self, body: dict[str, Any], started: float) -> tuple[float, int, float | None]:
        """A streamed request: the first chunk with text is the first token; the output tokens
        are the final usage's (`stream_options.include_usage`), else one per text chunk."""
        body["stream_options"] = {"include_usage": True}
        first, chunks, usage = None, 0, None
        for event in self.client.stream_events(self.client.url, body):
            choices = event.get("choices") if isinstance(event, dict) else None
            if choices and isinstance(choices[0], dict) and choices[0].get("text"):
                first = time.perf_counter() - started if first is None else first
                chunks += 1
            if isinstance(event, dict) and event.get("usage"):
                usage = self._usage_tokens(event, body["max_tokens"])
        return time.perf_counter() - started, chunks if usage is None else usage, first

    def _received_tokens(self, payload: Any, asked: int) -> int:
        """The tokens the answer carries (`choices[0].token_ids`, else its logprob tokens);
        only an answer with neither falls back to its usage count, bounded by `asked`."""
        choices = payload.get("choices") if isinstance(payload, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        if isinstance(choice, dict):
            ids = choice.get("token_ids")
            logprobs = choice.get("logprobs")
            tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
            for received in (ids, tokens):
                if isinstance(received, list):
                    if len(received) > asked:
                        raise EndpointError(f"{self.client.name} endpoint "
                                            f"{self.client.shown_url}: {len(received)} tokens "
                                            f"answered, {asked} asked for")
                    return len(received)
        return self._usage_tokens(payload, asked)

    def _usage_tokens(self, payload: Any, asked: int) -> int:
        """The server's `usage.completion_tokens`, refused past the `asked` budget (a claim is
        no count: a server cannot buy a speedup by reporting tokens it never sent)."""
        tokens = (payload.get("usage") or {}).get("completion_tokens") \
            if isinstance(payload, dict) else None
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise EndpointError(f"{self.client.name} endpoint {self.client.shown_url}: the answer "
                                "reports no usage.completion_tokens")
        if tokens > asked:
            raise EndpointError(f"{self.client.name} endpoint {self.client.shown_url}: it claims "
                                f"{tokens} completion tokens, {asked} asked for")
        return tokens

    def run_tier(self, concurrency: int, options: BenchOptions,
                 progress: Progress = NO_PROGRESS) -> TierRun:
        """`concurrency` workers sending the prompt mix until the tier's budget is spent (the
        requests answered are a stage of `progress`)."""
        count = options.requests or max(4, 2 * concurrency)
        deadline = None if options.duration_s is None else \
            time.monotonic() + options.duration_s
        lock, sent, done = threading.Lock(), [0], []

        def worker() -> None:
            while True:
                with lock:
                    if (deadline is None and sent[0] >= count) or \
                            (deadline is not None and time.monotonic() >= deadline):
                        return
                    prompt = options.prompts[sent[0] % len(options.prompts)]
                    sent[0] += 1
                result = self.request(prompt)
                with lock:
                    done.append(result)
                    progress.advanced()

        started = time.perf_counter()
        with (stage(progress, f"{self.client.name} at concurrency {concurrency}",
                    None if deadline is not None else count, "requests"),
              ThreadPoolExecutor(concurrency) as pool):
            for future in [pool.submit(worker) for _ in range(concurrency)]:
                future.result()
        seconds = time.perf_counter() - started
        latencies = sorted(s for s, _, _ in done)
        firsts = sorted(f for _, _, f in done if f is not None)
        tokens = sum(t for _, t, _ in done)
        return TierRun(len(done), tokens, round(seconds, 4),
                       round(tokens / seconds, 3) if seconds > 0 else 0.0,
                       round(percentile(latencies, 50), 4), round(percentile(latencies, 95), 4),
                       round(percentile(firsts, 50), 4) if firsts else None,
                       round(percentile(firsts, 95), 4) if firsts else None)


def run_bench(options: BenchOptions, progress: Progress = NO_PROGRESS) -> BenchReport:
    """Run every tier against the baseline, then the candidate (tau from its metrics); each
    endpoint's tier is a stage of `progress`, in requests."""
    if any(isinstance(p.prompt, Chat) for p in options.prompts):
        raise InputError("bench sends completions: give 'prompt' or 'prompt_ids' prompts")
    baseline = _Endpoint("baseline", options.baseline, options)
    candidate = _Endpoint("candidate", options.candidate, options)
    results = []
    try:
        for tier in options.tiers:
            base_run = baseline.run_tier(tier, options, progress)
            before = _scrape(candidate, options.candidate.metrics_url)
            cand_run = candidate.run_tier(tier, options, progress)
            after = _scrape(candidate, options.candidate.metrics_url)
            figures = acceptance_from_metrics(before, after) \
                if before is not None and after is not None else None
            results.append(TierResult(tier, base_run, cand_run,
                                      figures.mean_acceptance_length if figures else None))
    finally:
        baseline.client.close()
        candidate.client.close()
    return BenchReport(tuple(results))


def _scrape(endpoint: _Endpoint, url: str | None) -> dict[str, dict[str, float]] | None:
    return parse_prometheus(endpoint.client.get_text(url)) if url else None
