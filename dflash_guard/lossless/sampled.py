"""Is sampled speculative decoding exact? A statistical check.

For each prompt, draw `samples` continuations of `tokens` tokens twice, autoregressively and with
speculation (from independent random streams), and compare the two empirical distributions with
chi-square tests of homogeneity: one over whole continuations (joint) and one per token position
(marginal: a bias at one position is diluted over many joint cells). Exact rejection sampling makes
the two distributions identical, so under a correct sampler the check rejects with probability at
most `alpha` (Bonferroni: every one of the prompts * (tokens + 1) tests is run at `alpha` divided
by their number). A biased sampler is caught once `samples` is large enough for its bias.

Cells (distinct continuations) whose pooled count is under `min_cell` are merged, so the
chi-square approximation holds; the p-value is the regularised upper incomplete gamma function
(`torch.special.gammaincc`), so no statistics package is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from dflash_guard.errors import InputError
from dflash_guard.lossless.defaults import DEFAULT_ALPHA
from dflash_guard.lossless.options import SampledOptions
from dflash_guard.lossless.prompts import load_prompts
from dflash_guard.lossless.reference import runner_errors
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from kernels_ref.faults import Fault
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.loop import DraftModel
from kernels_ref.model import Target
from kernels_ref.plant import sampler_hooks
from kernels_ref.prompts import DEFAULT_PROMPTS
from kernels_ref.sampling import (
    SamplingParams,
    draft_block,
    probs_from_logits,
    sample,
    seeded,
    verify_block,
)
from kernels_ref.threads import ThreadChoice, choose_threads, count_parameters, using_threads
from kernels_ref.tokenizer import load_tokenizer

DEFAULT_MIN_CELL = 10
# The shipped prompts the runner check uses by default (one draw is one decode): those where
# the fixture drafter is accepted often enough for a biased resampler to show.
DEFAULT_RUNNER_PROMPTS = ("stop-newline-in-block", "single-token", "repetition-words")

# A sampler: (prompt ids, samples, tokens, seed) -> ([samples, tokens] continuations, mean draft
# tokens accepted per step or None when it does not speculate).
Draws = tuple[torch.Tensor, float | None]
Sampler = Callable[[Sequence[int], int, int, int], Draws]


class SampledModel(Protocol):
    """A target and a block drafter, evaluated without a cache over right-padded batches."""

    block_size: int  # anchor + (block_size - 1) draft tokens

    def target_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """[N, T] token ids -> [N, T, V]; causal: position t scores the token at t + 1."""
        ...

    def draft_logits(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[N, T] right-padded ids with [N] committed lengths -> [N, block_size - 1, V]: the
        drafter's scores for positions lengths .. lengths + block_size - 2."""
        ...


@dataclass(frozen=True)
class HomogeneityTest:
    """A chi-square test that two samples come from one distribution."""

    statistic: float
    dof: int
    p_value: float
    cells: int  # after merging rare continuations
    tv_distance: float  # total variation between the two empirical distributions (information)


@dataclass(frozen=True)
class SampledPromptResult:
    """One prompt: the joint test over whole continuations and one test per token position."""

    prompt_id: str
    test: HomogeneityTest  # joint: whole continuations
    positions: tuple[HomogeneityTest, ...]  # marginal: the token at each position
    rejected: bool
    mean_accepted: float | None  # draft tokens accepted per speculative step (information)

    @property
    def p_value(self) -> float:
        """The smallest p-value of the prompt's tests (compared with `per_test_alpha`)."""
        return min([self.test.p_value, *(t.p_value for t in self.positions)])


@dataclass(frozen=True)
class SampledReport:
    """The verdict: exact unless some test rejects at `per_test_alpha`."""

    alpha: float
    per_test_alpha: float  # alpha / (prompts * (tokens + 1)): Bonferroni over every test
    samples: int
    tokens: int
    params: SamplingParams
    greedy_draft: bool
    results: tuple[SampledPromptResult, ...]
    threads: ThreadChoice | None = None  # what decoding ran on (`run_sampled_difftest` sets it)

    @property
    def cannot_tell(self) -> bool:
        """No test had a degree of freedom: every draw was the same, so nothing could reject
        (a test with no power is no evidence of exactness)."""
        return not any(t.dof > 0 for r in self.results for t in (r.test, *r.positions))

    @property
    def passed(self) -> bool:
        return not self.cannot_tell and not any(r.rejected for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": "sampled",
            "passed": self.passed,
            "cannot_tell": self.cannot_tell,
            "alpha": self.alpha,
            "per_test_alpha": self.per_test_alpha,
            "samples": self.samples,
            "tokens": self.tokens,
            "params": asdict(self.params),
            "greedy_draft": self.greedy_draft,
            "results": [asdict(r) for r in self.results],
            "threads": None if self.threads is None else self.threads.to_json(),
        }


def chi2_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X ~ chi-square(dof): the regularised upper incomplete gamma."""
    if statistic <= 0:
        return 1.0
    half_dof, half_x = (torch.tensor(v / 2, dtype=torch.float64) for v in (dof, statistic))
    return float(torch.special.gammaincc(half_dof, half_x))


def homogeneity_test(
    first: torch.Tensor, second: torch.Tensor, *, min_cell: int = DEFAULT_MIN_CELL
) -> HomogeneityTest:
    """Chi-square test of homogeneity between two samples of sequences, [N1, K] and [N2, K]."""
    _, codes = torch.unique(torch.cat([first, second]), dim=0, return_inverse=True)
    n1, n2 = len(first), len(second)
    width = int(codes.max()) + 1
    c1 = torch.bincount(codes[:n1], minlength=width).double()
    c2 = torch.bincount(codes[n1:], minlength=width).double()
    tv = 0.5 * float((c1 / n1 - c2 / n2).abs().sum())
    pooled = c1 + c2
    common = pooled >= min_cell
    rare = ~common
    c1 = torch.cat([c1[common], c1[rare].sum().reshape(1)])
    c2 = torch.cat([c2[common], c2[rare].sum().reshape(1)])
    if c1[-1] + c2[-1] < min_cell and len(c1) > 1:  # fold a thin "rare" cell into the smallest
        smallest = int((c1[:-1] + c2[:-1]).argmin())
        c1[smallest] += c1[-1]
        c2[smallest] += c2[-1]
        c1, c2 = c1[:-1], c2[:-1]
    cells = len(c1)
    if cells < 2:
        return HomogeneityTest(0.0, 0, 1.0, cells, tv)
    total = c1 + c2
    e1, e2 = total * n1 / (n1 + n2), total * n2 / (n1 + n2)
    statistic = float(((c1 - e1) ** 2 / e1).sum() + ((c2 - e2) ** 2 / e2).sum())
    return HomogeneityTest(statistic, cells - 1, chi2_sf(statistic, cells - 1), cells, tv)


def sample_autoregressive(
    model: SampledModel,
    prompt: Sequence[int],
    *,
    samples: int,
    tokens: int,
    params: SamplingParams,
    generator: torch.Generator,
) -> torch.Tensor:
    """[samples, tokens] continuations drawn one token at a time from the target."""
    seqs = torch.tensor(list(prompt), dtype=torch.long).repeat(samples, 1)
    for _ in range(tokens):
        p = probs_from_logits(model.target_logits(seqs)[:, -1], params)
        seqs = torch.cat([seqs, sample(p, generator).unsqueeze(1)], dim=1)
    return seqs[:, len(prompt) :]


def sample_speculative(
    model: SampledModel,
    prompt: Sequence[int],
    *,
    samples: int,
    tokens: int,
    params: SamplingParams,
    draft_generator: torch.Generator,
    verify_generator: torch.Generator,
    greedy_draft: bool = True,
    inject: Fault | None = None,
) -> tuple[torch.Tensor, float]:
    """[samples, tokens] continuations drawn by draft-and-verify steps, and the mean number of
    draft tokens accepted per step. Draws advance in lockstep; each keeps its own length."""
    start, k = len(prompt), model.block_size - 1
    # Each step commits 1..k+1 tokens and runs until the slowest draw has `tokens`: at most
    # `tokens` steps, so no draw outgrows start + tokens * (k + 1), plus one block of drafts.
    seqs = torch.zeros((samples, start + tokens * (k + 1) + k), dtype=torch.long)
    seqs[:, :start] = torch.tensor(list(prompt), dtype=torch.long)
    lengths = torch.full((samples,), start, dtype=torch.long)
    rows = torch.arange(samples).unsqueeze(1)
    offsets = torch.arange(k + 1)
    accepted_total, steps = 0.0, 0
    hooks = sampler_hooks(inject)
    while int(lengths.min()) < start + tokens:
        draft, q, draft_uniforms = draft_block(
            model.draft_logits(seqs, lengths), params, draft_generator, greedy_draft=greedy_draft
        )
        seqs[rows, lengths.unsqueeze(1) + offsets[:k]] = draft
        logits = model.target_logits(seqs[:, : int(lengths.max()) + k])
        p = probs_from_logits(logits[rows, lengths.unsqueeze(1) - 1 + offsets], params)
        verdict = verify_block(
            p, draft, q, verify_generator, draft_uniforms=draft_uniforms, hooks=hooks
        )
        seqs[rows.squeeze(1), lengths + verdict.accepted] = verdict.next_token
        lengths = lengths + verdict.accepted + 1
        seqs[torch.arange(seqs.shape[1]) >= lengths.unsqueeze(1)] = 0  # drop rejected drafts
        accepted_total += float(verdict.accepted.double().mean())
        steps += 1
    return seqs[:, start : start + tokens], accepted_total / max(steps, 1)


def compare_samplers(
    baseline: Sampler,
    candidate: Sampler,
    prompts: Sequence[tuple[str, Sequence[int]]],
    *,
    params: SamplingParams,
    greedy_draft: bool,
    samples: int = 20_000,
    tokens: int = 3,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    min_cell: int = DEFAULT_MIN_CELL,
    progress: Progress = NO_PROGRESS,
) -> SampledReport:
    """Test, prompt by prompt, that `candidate` draws continuations distributed as `baseline`:
    one joint test over whole continuations plus one per token position (the marginals catch a
    bias at one position that the joint test dilutes over many cells), all at `alpha` divided by
    the number of tests.

    Each sampler gets its own seed (a candidate derives its drafting and verifying streams from
    `seed` and `seed + 1`), so the two samples are independent. The prompts are a stage of
    `progress`.
    """
    if params.greedy:
        raise ValueError("the sampled check needs temperature > 0")
    if not prompts or samples < 1 or tokens < 1 or not 0 < alpha < 1:
        raise ValueError("need prompts, samples >= 1, tokens >= 1 and 0 < alpha < 1")
    per_test_alpha = alpha / (len(prompts) * (tokens + 1))
    results = []
    with stage(progress, f"sampling {samples} draws per prompt and side", len(prompts),
               "prompts"):
        for index, (prompt_id, prompt) in enumerate(prompts):
            base_seed = seed * 1_000_003 + 3 * index
            reference, _ = baseline(prompt, samples, tokens, base_seed)
            drawn, mean_accepted = candidate(prompt, samples, tokens, base_seed + 1)
            joint = homogeneity_test(reference, drawn, min_cell=min_cell)
            positions = tuple(
                homogeneity_test(reference[:, j : j + 1], drawn[:, j : j + 1], min_cell=min_cell)
                for j in range(tokens)
            )
            rejected = min([joint.p_value, *(t.p_value for t in positions)]) < per_test_alpha
            results.append(
                SampledPromptResult(prompt_id, joint, positions, rejected, mean_accepted))
            progress.advanced(1, f"{sum(r.rejected for r in results)} rejected")
    return SampledReport(
        alpha, per_test_alpha, samples, tokens, params, greedy_draft, tuple(results)
    )


def check_sampled(
    model: SampledModel,
    prompts: Sequence[tuple[str, Sequence[int]]],
    *,
    samples: int = 20_000,
    tokens: int = 3,
    params: SamplingParams | None = None,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    greedy_draft: bool = True,
    inject: Fault | None = None,
    min_cell: int = DEFAULT_MIN_CELL,
) -> SampledReport:
    """The check on a cache-free model pair, both samplers vectorised over the draws."""
    params = params or SamplingParams()

    def autoregressive(prompt: Sequence[int], n: int, k: int, s: int) -> Draws:
        generator = seeded(s)
        return sample_autoregressive(
            model, prompt, samples=n, tokens=k, params=params, generator=generator
        ), None

    def speculative(prompt: Sequence[int], n: int, k: int, s: int) -> Draws:
        return sample_speculative(
            model, prompt, samples=n, tokens=k, params=params,
            draft_generator=seeded(s),
            verify_generator=seeded(s + 1),
            greedy_draft=greedy_draft, inject=inject,
        )

    return compare_samplers(
        autoregressive, speculative, prompts, params=params, greedy_draft=greedy_draft,
        samples=samples, tokens=tokens, alpha=alpha, seed=seed, min_cell=min_cell,
    )


def runner_sampler(
    target: Target,
    drafter: DraftModel | None,
    params: SamplingParams,
    *,
    block_size: int | None = None,
    inject: Fault | None = None,
) -> Sampler:
    """A sampler that decodes each draw with `kernels_ref.loop.generate` (the runner under test,
    KV cache and all): autoregressive without a drafter, speculative with one."""

    def draw(prompt: Sequence[int], samples: int, tokens: int, seed: int) -> Draws:
        rows, accepted, steps = [], 0, 0
        for index in range(samples):
            generation = generate(
                target, drafter, list(prompt), max_new_tokens=tokens, stop_ids=frozenset(),
                block_size=block_size, inject=inject, sampling=params,
                seed=seed * 1_000_003 + index,
            )
            rows.append(generation.tokens)
            accepted += sum(step.accepted for step in generation.steps)
            steps += len(generation.steps)
        if any(len(row) != tokens for row in rows):
            raise InputError("a prompt leaves no room for the sampled tokens in the context")
        mean = accepted / steps if drafter is not None and steps else None
        return torch.tensor(rows, dtype=torch.long), mean

    return draw


@runner_errors()
def run_sampled_difftest(options: SampledOptions,
                         progress: Progress = NO_PROGRESS) -> SampledReport:
    """Load the pair and check the runner's sampled speculative decoding against its own
    autoregressive sampling (default prompts: three of the shipped set).

    Decoding runs on `options.threads` torch CPU threads, or on what
    `kernels_ref.threads.choose_threads` picks for the pair's size (restored afterwards).
    Loading and sampling are stages of `progress`.
    """
    o = options
    try:
        params = SamplingParams(temperature=o.temperature, top_k=o.top_k, top_p=o.top_p)
    except ValueError as error:
        raise InputError(str(error)) from None
    with stage(progress, f"loading {o.target} and {o.drafter}"):
        target = load_target(Path(o.target), o.device, o.dtype)
        drafter = load_drafter(Path(o.drafter), target, o.device, o.dtype)
        tokenizer = load_tokenizer(Path(o.target))
        prompt_set = load_prompts(
            o.prompts or DEFAULT_PROMPTS, tokenizer, target.config.vocab_size, Path(o.target)
        )
    if o.prompts is None:
        prompt_set = [p for p in prompt_set if p.id in DEFAULT_RUNNER_PROMPTS]
    choice = choose_threads(count_parameters(target, drafter), requested=o.threads)
    with using_threads(choice):
        report = compare_samplers(
            runner_sampler(target, None, params),
            runner_sampler(target, drafter, params, block_size=o.block_size, inject=o.inject),
            [(p.id, p.ids) for p in prompt_set],
            params=params, greedy_draft=True, samples=o.samples, tokens=o.sample_tokens,
            alpha=o.alpha, seed=o.seed, progress=progress,
        )
    return replace(report, threads=choice)
