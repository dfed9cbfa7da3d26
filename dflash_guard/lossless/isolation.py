"""The isolation diff: a prompt's greedy output must not depend on the engine's other tenants.

One engine (the candidate) decodes every prompt three times over: first each prompt alone, one
request at a time (the solo runs); then a wave of tenant requests, each opening with a long prefix
of one prompt (three quarters of it) and then going its own way, so a prefix/radix cache holds
entries the prompts will match; then every prompt again, interleaved with those tenants and each
other, `concurrency` requests in flight (batched verification). Each prompt's concurrent output is
compared with its solo run by the endpoint diff's rules (`endpoint.compare`): identical, a near-tie
(a batch-shape numerical flip) or a hard divergence (state shared across requests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from dflash_guard.errors import InputError
from dflash_guard.lossless.defaults import DEFAULT_MAX_NEW_TOKENS
from dflash_guard.lossless.endpoint.client import Completion
from dflash_guard.lossless.endpoint.compare import compare_completions, result_json
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.result import ClassifiedResults, PromptResult
from dflash_guard.near_tie import ENGINE, NEAR_TIE_MARGIN
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from kernels_ref.prompts import PromptSpec

SHARED_SHARE = 0.75  # the share of a prompt a tenant's request repeats before its own tail
MIN_SHARED = 8  # characters or token ids: a shorter prompt gets no prefix-sharing tenant
TENANT_TAIL = " # another tenant's request goes its own way from here"

T = TypeVar("T")


@dataclass(frozen=True)
class IsolationOptions:
    """Everything an isolation diff needs besides the prompts; checked when built."""

    candidate: EngineEndpoint  # the engine under test (with its drafter)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    concurrency: int = 4
    near_tie_margin: float = NEAR_TIE_MARGIN[ENGINE]
    token_ids: bool = True  # ask for vLLM's token-id fields

    def __post_init__(self) -> None:
        if self.concurrency < 2 or self.max_new_tokens < 1 or self.near_tie_margin < 0:
            raise InputError("the isolation diff needs --concurrency of at least 2 (other "
                             "tenants in flight), and a positive max-new-tokens")


@dataclass(frozen=True)
class IsolationReport(ClassifiedResults):
    """Each prompt's concurrent output against its solo run: hard divergences fail."""

    candidate: str
    near_tie_margin: float
    concurrency: int
    tenants: int  # prefix-sharing tenant requests sent (twice each)
    results: tuple[PromptResult, ...]

    @property
    def cannot_tell(self) -> bool:
        """Nothing was tested: no prompt ran among a prefix-sharing tenant."""
        return self.tenants == 0 or not self.results

    @property
    def identical(self) -> bool:
        return not self.cannot_tell and super().identical

    @property
    def passed(self) -> bool:
        """Something was tested, and no hard divergence (near-ties are left to the policy)."""
        return not self.cannot_tell and not self.hard_divergences

    def to_json(self) -> dict[str, Any]:
        results = []
        for r in self.results:
            row = result_json(r)
            row["solo_token"] = row.pop("baseline_token")
            row["concurrent_token"] = row.pop("candidate_token")
            row["solo_length"] = row.pop("baseline_length")
            row["concurrent_length"] = row.pop("candidate_length")
            results.append(row)
        return {
            "mode": "isolation",
            "candidate": self.candidate,
            "identical": self.identical,
            "passed": self.passed,
            "cannot_tell": self.cannot_tell,
            "prompts": len(self.results),
            "tenants": self.tenants,
            "concurrency": self.concurrency,
            "hard": len(self.hard_divergences),
            "near_ties": len(self.near_ties),
            "near_tie_margin": self.near_tie_margin,
            "results": results,
        }


def tenant_of(prompt: PromptSpec) -> PromptSpec | None:
    """Another tenant's request opening with the first three quarters of `prompt`, then its own
    tail (no longer than the part it replaces); None for chats and prompts too short to share."""
    body = prompt.prompt
    if not isinstance(body, str | tuple) or len(body) < MIN_SHARED:
        return None
    cut = max(MIN_SHARED // 2, int(len(body) * SHARED_SHARE))
    if isinstance(body, str):
        tail: str | tuple[int, ...] = (TENANT_TAIL * len(body))[: len(body) - cut]
    else:
        tail = tuple(reversed(body[cut:]))
    shared = body[:cut] + tail  # type: ignore[operator]
    if shared == body:
        return None
    return replace(prompt, id=f"{prompt.id}~tenant", prompt=shared)


def _all(pool: ThreadPoolExecutor, work: Callable[[T], Completion],
         items: Sequence[T]) -> list[Completion]:
    """Run `work` on every item in `pool`; the first failure is raised (the rest cancelled)."""
    futures = [pool.submit(work, item) for item in items]
    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
    failed = next((f for f in futures if f in done and f.exception()), None)
    if failed is not None:
        for future in futures:
            future.cancel()
        raise failed.exception()  # type: ignore[misc]
    return [f.result() for f in futures]


def run_isolation_diff(
    options: IsolationOptions, prompts: Iterable[PromptSpec], progress: Progress = NO_PROGRESS,
) -> IsolationReport:
    """Solo runs, a tenant wave, then the prompts among tenants; compare each with its solo run.

    The solo runs and the runs among tenants are stages of `progress`. Raises `EndpointError`
    when the endpoint cannot be used; divergences are results.
    """
    prompts = list(prompts)
    if not prompts:
        raise InputError("no prompts to send")
    o = options
    tenants = [t for t in map(tenant_of, prompts) if t is not None]
    with o.candidate.client("candidate", token_ids=o.token_ids,
                            pool_size=o.concurrency) as client:
        model = o.candidate.model or client.first_model()

        def complete(prompt: PromptSpec) -> Completion:
            return client.complete(prompt, model=model, max_tokens=o.max_new_tokens)

        solo = []
        with stage(progress, "each prompt alone", len(prompts), "prompts"):
            for p in prompts:
                solo.append(complete(p))
                progress.advanced()
        with (stage(progress, f"among {len(tenants)} tenants"),
              ThreadPoolExecutor(max_workers=o.concurrency,
                                 thread_name_prefix="isolation-diff") as pool):
            _all(pool, complete, tenants)
            by_id = {t.id: t for t in tenants}
            mixed: list[PromptSpec] = []
            for p in prompts:  # each prompt right behind its tenant, all in one queue
                tenant = by_id.get(f"{p.id}~tenant")
                mixed += [tenant, p] if tenant is not None else [p]
            answers = dict(zip((p.id for p in mixed), _all(pool, complete, mixed), strict=True))
    results = tuple(
        compare_completions(p.id, alone, answers[p.id], near_tie_margin=o.near_tie_margin)
        for p, alone in zip(prompts, solo, strict=True)
    )
    return IsolationReport(o.candidate.shown_url, o.near_tie_margin, o.concurrency,
                           len(tenants), results)
