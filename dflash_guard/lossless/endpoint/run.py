"""Running an endpoint diff: every prompt to both engines, compared, with acceptance figures."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.lossless.defaults import DEFAULT_MAX_NEW_TOKENS
from dflash_guard.lossless.endpoint.client import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    CompletionClient,
    http_url_parts,
    redact_url,
)
from dflash_guard.lossless.endpoint.compare import (
    DEFAULT_NEAR_TIE_MARGIN,
    compare_completions,
    result_json,
)
from dflash_guard.lossless.endpoint.metrics import (
    AcceptanceFigures,
    ResponseDrafts,
    acceptance_from_metrics,
    acceptance_warnings,
    parse_prometheus,
)
from dflash_guard.lossless.result import ClassifiedResults, PromptResult, Status
from kernels_ref.prompts import Chat, PromptSpec


@dataclass(frozen=True)
class EndpointOptions:
    """Everything an endpoint diff needs besides the prompts; checked when built."""

    baseline: str  # URL of the engine without speculation
    candidate: str  # URL of the engine with the drafter
    model: str | None = None  # served model name; None: each server's first model
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    concurrency: int = 4
    api_key: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    backoff: float = 0.5
    near_tie_margin: float = DEFAULT_NEAR_TIE_MARGIN
    metrics_url: str | None = None  # the candidate's Prometheus endpoint
    token_ids: bool = True  # ask for vLLM's token-id fields

    def __post_init__(self) -> None:
        if (
            self.concurrency < 1
            or self.max_new_tokens < 1
            or self.timeout <= 0
            or self.near_tie_margin < 0
        ):
            raise InputError("concurrency, max-new-tokens and timeout must be positive")
        if self.metrics_url:
            http_url_parts(self.metrics_url)


@dataclass(frozen=True)
class EndpointDiffReport(ClassifiedResults):
    """The verdict of an endpoint diff: hard divergences fail, near-ties are counted."""

    baseline: str
    candidate: str
    near_tie_margin: float
    results: tuple[PromptResult, ...]
    acceptance: AcceptanceFigures | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    response_drafts: ResponseDrafts | None = None  # the candidate's per-response draft counts

    @property
    def identical(self) -> bool:
        """Every prompt gave the same tokens on both endpoints."""
        return all(r.status is Status.identical for r in self.results)

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
            "results": [result_json(r) for r in self.results],
            "acceptance": asdict(self.acceptance) if self.acceptance else None,
            "response_drafts": asdict(self.response_drafts) if self.response_drafts else None,
            "warnings": list(self.warnings),
        }


def run_endpoint_diff(
    options: EndpointOptions, prompts: Iterable[PromptSpec]
) -> EndpointDiffReport:
    """Send every prompt to both endpoints (at most `concurrency` prompts in flight) and compare.

    Raises `EndpointError` when an endpoint cannot be used (unreachable, timeout, refusal,
    malformed answer); divergences are results, not errors.
    """
    prompts = list(prompts)
    if not prompts:
        raise InputError("no prompts to send")
    o = options
    client = dict(api_key=o.api_key, timeout=o.timeout, retries=o.retries, backoff=o.backoff,
                  token_ids=o.token_ids, pool_size=o.concurrency)
    with (
        CompletionClient("baseline", o.baseline, **client) as base,
        CompletionClient("candidate", o.candidate, **client) as cand,
    ):
        base_model = o.model or base.first_model()
        cand_model = o.model or cand.first_model()
        before = parse_prometheus(cand.get_text(o.metrics_url)) if o.metrics_url else None

        def one(prompt: PromptSpec) -> tuple[PromptResult, tuple[int, int] | None]:
            left = base.complete(prompt, model=base_model, max_tokens=o.max_new_tokens)
            right = cand.complete(prompt, model=cand_model, max_tokens=o.max_new_tokens)
            # a chat's text is each engine's parsed message (llama.cpp trims the content's
            # leading space, vLLM does not): equal token ids decide there
            result = compare_completions(prompt.id, left, right, near_tie_margin=o.near_tie_margin,
                                         compare_text=not isinstance(prompt.prompt, Chat))
            return result, right.drafts

        pool = ThreadPoolExecutor(max_workers=o.concurrency, thread_name_prefix="endpoint-diff")
        try:
            futures = [pool.submit(one, p) for p in prompts]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f in done and f.exception()), None)
            if failed is not None:
                pool.shutdown(wait=False, cancel_futures=True)
                raise failed.exception()  # type: ignore[misc]
            answers = [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

        acceptance, warnings = None, []
        if before is not None and o.metrics_url:
            after = parse_prometheus(cand.get_text(o.metrics_url))
            acceptance = acceptance_from_metrics(before, after)
            warnings = acceptance_warnings(acceptance)
    return EndpointDiffReport(
        redact_url(o.baseline),
        redact_url(o.candidate),
        o.near_tie_margin,
        tuple(result for result, _ in answers),
        acceptance,
        tuple(warnings),
        ResponseDrafts.total(drafts for _, drafts in answers),
    )
