"""Running an endpoint diff: every prompt to both engines, compared, with acceptance figures."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.lossless.defaults import DEFAULT_MAX_NEW_TOKENS
from dflash_guard.lossless.endpoint.client import Completion
from dflash_guard.lossless.endpoint.compare import compare_completions, result_json, until_stop
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.endpoint.metrics import (
    AcceptanceFigures,
    ResponseDrafts,
    acceptance_from_metrics,
    acceptance_warnings,
    parse_prometheus,
)
from dflash_guard.lossless.result import ClassifiedResults, PromptResult
from dflash_guard.near_tie import ENGINE, NEAR_TIE_MARGIN
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from kernels_ref.prompts import Chat, PromptSpec


@dataclass(frozen=True)
class EndpointOptions:
    """Everything an endpoint diff needs besides the prompts; checked when built."""

    baseline: EngineEndpoint  # the engine without speculation
    candidate: EngineEndpoint  # the engine with the drafter (its metrics URL: acceptance)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    concurrency: int = 4
    near_tie_margin: float = NEAR_TIE_MARGIN[ENGINE]
    token_ids: bool = True  # ask for vLLM's token-id fields

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.max_new_tokens < 1 or self.near_tie_margin < 0:
            raise InputError("concurrency and max-new-tokens must be positive")


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
    fail_on_warning: bool = False  # an acceptance warning fails the diff too

    @property
    def passed(self) -> bool:
        """No hard divergence (near-ties are left to the policy), and no warning when
        `fail_on_warning`."""
        return not self.hard_divergences and not (self.fail_on_warning and self.warnings)

    def record_section(self) -> dict[str, Any]:
        """This diff's section of the approval record (URLs without credentials; the gate adds
        the policy's bounds)."""
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "prompts": len(self.results),
            "identical": self.identical,
            "hard": len(self.hard_divergences),
            "near_ties": len(self.near_ties),
            "divergences": [r.prompt_id for r in (*self.hard_divergences, *self.near_ties)],
            "acceptance": asdict(self.acceptance) if self.acceptance else None,
            "warnings": list(self.warnings),
        }

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
    options: EndpointOptions, prompts: Iterable[PromptSpec], progress: Progress = NO_PROGRESS,
) -> EndpointDiffReport:
    """Send every prompt to both endpoints (at most `concurrency` requests in flight on each)
    and compare.

    The prompts answered by both are a stage of `progress`. Raises `EndpointError` when an
    endpoint cannot be used (unreachable, timeout, refusal, malformed answer); divergences are
    results, not errors.
    """
    prompts = list(prompts)
    if not prompts:
        raise InputError("no prompts to send")
    o = options
    metrics_url = o.candidate.metrics_url
    with (
        o.baseline.client("baseline", token_ids=o.token_ids, pool_size=o.concurrency) as base,
        o.candidate.client("candidate", token_ids=o.token_ids, pool_size=o.concurrency) as cand,
    ):
        base_model = o.baseline.model or base.first_model()
        cand_model = o.candidate.model or cand.first_model()
        before = parse_prometheus(cand.get_text(metrics_url)) if metrics_url else None

        # Each engine gets its own `concurrency` requests in flight, as a client of the engine
        # alone would: a prompt's two requests do not wait for each other.
        pools = (ThreadPoolExecutor(max_workers=o.concurrency, thread_name_prefix="baseline"),
                 ThreadPoolExecutor(max_workers=o.concurrency, thread_name_prefix="candidate"))
        try:
            left = [pools[0].submit(base.complete, p, model=base_model,
                                    max_tokens=o.max_new_tokens) for p in prompts]
            right = [pools[1].submit(cand.complete, p, model=cand_model,
                                     max_tokens=o.max_new_tokens) for p in prompts]
            with stage(progress, "asking both engines", 2 * len(prompts), "requests"):
                for future in as_completed(left + right):  # the first failure stops the rest
                    if (error := future.exception()) is not None:
                        for pool in pools:
                            pool.shutdown(wait=False, cancel_futures=True)
                        raise error
                    progress.advanced()
            pairs = [(a.result(), b.result()) for a, b in zip(left, right, strict=True)]
        finally:
            for pool in pools:
                pool.shutdown(wait=True, cancel_futures=True)
        answers = [(_compare(p, a, b, o.near_tie_margin), b.drafts)
                   for p, (a, b) in zip(prompts, pairs, strict=True)]

        acceptance, warnings = None, []
        if before is not None and metrics_url:
            after = parse_prometheus(cand.get_text(metrics_url))
            acceptance = acceptance_from_metrics(before, after)
            warnings = acceptance_warnings(acceptance)
    return EndpointDiffReport(
        o.baseline.shown_url,
        o.candidate.shown_url,
        o.near_tie_margin,
        tuple(result for result, _ in answers),
        acceptance,
        tuple(warnings),
        ResponseDrafts.total(drafts for _, drafts in answers),
    )


def _compare(prompt: PromptSpec, baseline: Completion, candidate: Completion,
             near_tie_margin: float) -> PromptResult:
    """One prompt's two answers, each cut at its first stop token id (vLLM stops there, llama.cpp
    ignores `stop_token_ids` and decodes on). Equal token ids decide for a chat (each engine
    parses its own message: llama.cpp trims the content's leading space, vLLM does not) and
    where a cut was made (the text of an engine that decoded on goes past it)."""
    stops = frozenset(s for s in prompt.stop if not isinstance(s, str))
    left, right = until_stop(baseline, stops), until_stop(candidate, stops)
    cut = left is not baseline or right is not candidate
    return compare_completions(prompt.id, left, right, near_tie_margin=near_tie_margin,
                               compare_text=not isinstance(prompt.prompt, Chat) and not cut)
