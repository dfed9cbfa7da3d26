"""Losslessness diff test: greedy speculative decoding must reproduce the target's greedy output.

Every prompt is decoded twice with the `kernels_ref` runner, autoregressively (block size 1) and
speculatively with the drafter; token ids and decoded bytes must be identical. The report gives,
per divergence, the first differing position, both tokens and the target's top-2 logit margin
there (a tiny margin points at a numerical near-tie, a large one at a logic bug), and summarises
acceptance: mean acceptance length tau, its histogram, target forwards saved, and warnings for
implausible acceptance (every block fully accepted: future leakage; tau near 1: mask-token
aliasing; tau below the clean reference when a fault is injected).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.lossless.defaults import DEFAULT_MAX_NEW_TOKENS
from dflash_guard.lossless.options import LocalOptions
from dflash_guard.lossless.prompts import Prompt, load_prompts
from dflash_guard.lossless.reference import runner_errors
from dflash_guard.lossless.result import (
    Divergence,
    PromptResult,
    SpeculationStats,
    first_difference,
    token_at,
)
from dflash_guard.near_tie import NEAR_TIE_MARGIN, judge_near_tie
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from kernels_ref.checkpoint import eos_token_ids, parse_device
from kernels_ref.cuda_graphs import GraphRunner, static_len
from kernels_ref.drafter import Drafter
from kernels_ref.faults import Fault
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.loop import DraftModel, Generation
from kernels_ref.model import Target
from kernels_ref.prompts import DEFAULT_PROMPTS
from kernels_ref.threads import ThreadChoice, choose_threads, count_parameters, using_threads
from kernels_ref.tokenizer import Tokenizer, load_tokenizer

LEAKAGE_MIN_STEPS = 4  # every block fully accepted over at least this many steps: suspicious
COLLAPSE_TAU = 1.25  # tau at or below this with a drafter: the mask-token-aliasing symptom
COLLAPSE_MIN_STEPS = 8
REGRESSION_RATIO = 0.95  # tau under test below this share of the reference tau is flagged


@dataclass(frozen=True)
class DifftestReport:
    """All prompts' results plus the acceptance summary and warnings."""

    results: tuple[PromptResult, ...]
    block_size: int
    tau: float
    histogram: dict[str, int]
    warnings: list[str]
    inject: Fault | None = None
    tau_reference: float | None = None
    fail_on_warning: bool = False  # an acceptance warning fails the diff too
    threads: ThreadChoice | None = None  # what decoding ran on (`run_difftest` sets it)

    @property
    def identical(self) -> bool:
        """Every prompt's speculative output equals its autoregressive one (a fact)."""
        return all(result.identical for result in self.results)

    @property
    def passed(self) -> bool:
        """Identical, and no warning when `fail_on_warning`."""
        return self.identical and not (self.fail_on_warning and self.warnings)

    @property
    def divergences(self) -> list[PromptResult]:
        return [result for result in self.results if not result.identical]

    @property
    def target_forwards_ar(self) -> int:
        return sum(_stats(result).target_forwards_ar for result in self.results)

    @property
    def target_forwards_spec(self) -> int:
        return sum(_stats(result).target_forwards_spec for result in self.results)

    def record_section(self) -> dict[str, Any]:
        """This diff's section of the approval record (the gate adds the policy's bounds)."""
        return {
            "prompts": len(self.results),
            "identical": self.identical,
            "divergences": [result.prompt_id for result in self.divergences],
            "tau": round(self.tau, 4),
            "warnings": list(self.warnings),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": "local",
            "passed": self.passed,
            "overall": {
                "identical": self.identical,
                "tau_mean": round(self.tau, 4),
                "tau_reference": None
                if self.tau_reference is None
                else round(self.tau_reference, 4),
                "histogram": self.histogram,
                "block_size": self.block_size,
                "target_forwards_ar": self.target_forwards_ar,
                "target_forwards_spec": self.target_forwards_spec,
                "forwards_saved": self.target_forwards_ar - self.target_forwards_spec,
                "warnings": self.warnings,
                "inject": self.inject,
                "divergences": [result.prompt_id for result in self.divergences],
            },
            "prompts": [_prompt_json(result) for result in self.results],
            "threads": None if self.threads is None else self.threads.to_json(),
        }


def _prompt_json(result: PromptResult) -> dict[str, Any]:
    """One prompt in the local report's JSON (its field names predate the shared type)."""
    d, stats = result.divergence_fields(), _stats(result)
    return {
        "id": result.prompt_id,
        "identical": result.identical,
        "first_diff_position": d["position"],
        "ar_token": d["reference_token"],
        "spec_token": d["candidate_token"],
        "top2_margin": d["margin"],
        "tau": stats.tau,
        "steps": stats.steps,
        "target_forwards_ar": stats.target_forwards_ar,
        "target_forwards_spec": stats.target_forwards_spec,
        "ar_text": result.reference_text,
        "spec_text": result.candidate_text,
        "histogram": stats.histogram,
        "acceptance": list(stats.acceptance),
        "stop_reason": stats.stop_reason,
        "near_tie": d["near_tie"],
        "prompt_ids": list(result.prompt_ids),
        "output_ids": list(result.output_ids),
    }


def default_stop_ids(target_dir: Path) -> frozenset[int]:
    """The target's EOS ids: `generation_config.json`, else `config.json`."""
    return eos_token_ids(target_dir)


def compare(
    ar: Generation,
    spec: Generation,
    prompt: Prompt,
    tokenizer: Tokenizer | None,
    block_size: int,
    near_tie_margin: float = 0.0,
) -> PromptResult:
    """Compare one prompt's two generations (a divergence at a margin below
    `near_tie_margin` is marked as a likely numerical near-tie)."""
    a, s = ar.tokens, spec.tokens
    decode = tokenizer.decode_bytes if tokenizer is not None else (lambda ids: b"")
    position = first_difference(a, s)
    divergence = None
    if position is not None:
        margin = ar.margins[position] if position < len(ar.margins) else None
        divergence = Divergence(
            position,
            token_at(a, position),
            token_at(s, position),
            None if margin is None else round(margin, 6),
            near_tie=judge_near_tie(margin, near_tie_margin)[0],
        )
    elif decode(a) != decode(s):
        divergence = Divergence(None, None, None, None, detail="same tokens but different text")
    histogram = Counter(spec.acceptance)
    return PromptResult(
        prompt.id,
        divergence,
        reference_length=len(a),
        candidate_length=len(s),
        reference_text=decode(a).decode("utf-8", errors="replace"),
        candidate_text=decode(s).decode("utf-8", errors="replace"),
        speculation=SpeculationStats(
            tau=round(spec.tau, 4),
            steps=len(spec.steps),
            target_forwards_ar=ar.target_forwards,
            target_forwards_spec=spec.target_forwards,
            histogram={str(n): histogram[n] for n in range(1, block_size + 1)},
            acceptance=tuple(spec.acceptance),
            stop_reason=ar.stop_reason,
        ),
        prompt_ids=prompt.ids,
        output_ids=tuple(a),
    )


def _precision(target: Target) -> str:
    """The dtype the target computes in, as `NEAR_TIE_MARGIN` names it (`torch.float32` ->
    `float32`)."""
    return str(target.model.embed_tokens.weight.dtype).removeprefix("torch.")


def _stats(result: PromptResult) -> SpeculationStats:
    assert result.speculation is not None  # the local diff always speculates
    return result.speculation


def mean_acceptance(generations: list[Generation]) -> float:
    """tau over every step of `generations` (tokens committed per step, as upstream counts
    them); 0.0 with no steps."""
    lengths = [length for gen in generations for length in gen.acceptance]
    return sum(lengths) / len(lengths) if lengths else 0.0


def acceptance_warnings(
    generations: list[Generation], block_size: int, tau_reference: float | None = None
) -> list[str]:
    """Warnings about implausible acceptance across all speculative generations."""
    steps = [step for gen in generations for step in gen.steps]
    if not steps or block_size < 2:
        return []
    tau = mean_acceptance(generations)
    warnings = []
    if len(steps) >= LEAKAGE_MIN_STEPS and all(s.accepted + 1 == s.block_size for s in steps):
        warnings.append(
            f"every one of {len(steps)} speculative steps accepted its whole block: implausible "
            "for a real drafter; suspect information from the future leaking into the draft"
        )
    if len(steps) >= COLLAPSE_MIN_STEPS and tau <= COLLAPSE_TAU:
        warnings.append(
            f"mean acceptance length {tau:.2f} is near 1: the drafter proposes almost nothing "
            "the target accepts (mask-token aliasing symptom: is mask_token_id a dedicated, "
            "unused token?)"
        )
    if tau_reference is not None and tau < REGRESSION_RATIO * tau_reference:
        warnings.append(
            f"mean acceptance length {tau:.2f} is below the clean reference runner's "
            f"{tau_reference:.2f} on the same pair: the speculative path loses acceptance "
            "(wrong draft context, hidden-state offset or similar)"
        )
    return warnings


def difftest_models(
    target: Target,
    drafter: DraftModel,
    prompts: list[Prompt],
    *,
    stop_ids: frozenset[int],
    tokenizer: Tokenizer | None = None,
    max_new_tokens: int | None = None,
    block_size: int | None = None,
    inject: Fault | None = None,
    cuda_graphs: bool = False,
    progress: Progress = NO_PROGRESS,
) -> DifftestReport:
    """Diff-test loaded models on `prompts` (the library core; `run_difftest` loads folders).

    A prompt's own `max_new_tokens` is capped by `max_new_tokens`; prompts without one use
    `max_new_tokens` or 64. With `inject`, the clean speculative path is also run, as the
    acceptance reference. With `cuda_graphs`, both decodes run through a `GraphRunner` (static
    caches; decode, verify and draft steps captured as CUDA graphs on a CUDA device, run eagerly
    over the same static buffers elsewhere). The prompts are the stage `decoding` of
    `progress`, with the tokens decoded and tau so far.
    """
    if inject is not None and not inject.greedy:
        raise InputError(f"{inject} plants a sampler bug: use it with `difftest sampled`")
    size = block_size or drafter.config.block_size
    if size < 1:
        raise InputError("block size must be at least 1")
    if size > target.config.max_position_embeddings:  # and the histograms would be huge
        raise InputError(
            f"block size {size} exceeds the target's context "
            f"({target.config.max_position_embeddings} positions)"
        )
    results, spec_runs, reference_runs = [], [], []
    near_tie = NEAR_TIE_MARGIN.get(_precision(target), 0.0)
    budgets = []
    for prompt in prompts:
        budget = prompt.max_new_tokens or max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        if max_new_tokens is not None:
            budget = min(budget, max_new_tokens)
        if len(prompt.ids) >= target.config.max_position_embeddings:
            raise InputError(f"prompt {prompt.id!r} does not fit the target's context")
        budgets.append(budget)
    models: tuple[Any, Any] = (target, drafter)
    if cuda_graphs:
        models = _graph_models(target, drafter, prompts, max(budgets), size, inject)
    with stage(progress, "decoding", len(prompts), "prompts"):
        for prompt, budget in zip(prompts, budgets, strict=True):
            stops = stop_ids | prompt.stop_ids
            ar = generate(models[0], None, list(prompt.ids), max_new_tokens=budget,
                          stop_ids=stops)
            spec = generate(*models, list(prompt.ids), block_size=size, inject=inject,
                            max_new_tokens=budget, stop_ids=stops)
            if inject is not None:
                reference_runs.append(generate(target, drafter, list(prompt.ids),
                                               block_size=size, max_new_tokens=budget,
                                               stop_ids=stops))
            spec_runs.append(spec)
            results.append(compare(ar, spec, prompt, tokenizer, size, near_tie))
            tokens = sum(len(run.tokens) for run in spec_runs)
            progress.advanced(1, f"{tokens} tokens, tau {mean_acceptance(spec_runs):.2f}")
    histogram = Counter(length for gen in spec_runs for length in gen.acceptance)
    tau_reference = mean_acceptance(reference_runs) if reference_runs else None
    warnings = acceptance_warnings(spec_runs, size, tau_reference)
    if drafter.config.mask_token_id in stop_ids:
        warnings.append(
            f"mask_token_id {drafter.config.mask_token_id} is also a stop token: an engine that "
            "stops on it ends every request after one block"
        )
    return DifftestReport(
        results=tuple(results),
        block_size=size,
        tau=mean_acceptance(spec_runs),
        histogram={str(n): histogram[n] for n in range(1, size + 1)},
        warnings=warnings,
        inject=inject,
        tau_reference=tau_reference,
    )


def _graph_models(
    target: Target,
    drafter: DraftModel,
    prompts: list[Prompt],
    budget: int,
    size: int,
    inject: Fault | None,
) -> tuple[Any, Any]:
    """The runner's stand-ins for `target` and `drafter`, sized for the longest prompt."""
    if not isinstance(drafter, Drafter):
        raise InputError("CUDA graphs need a DFlash drafter (kernels_ref.drafter.Drafter)")
    if inject is Fault.STALE_KV:
        raise InputError(
            "the stale-kv fault keeps every rejected draft in the cache, past the runner's "
            "fixed size: run it without CUDA graphs"
        )
    longest = max(len(prompt.ids) for prompt in prompts)
    max_len = static_len(longest, budget, target.config.max_position_embeddings)
    runner = GraphRunner(target, drafter, max_len=max_len, block_sizes=(size,))
    return runner.target, runner.drafter


@runner_errors()
def run_difftest(options: LocalOptions, progress: Progress = NO_PROGRESS) -> DifftestReport:
    """Load the pair from HF-style folders and diff-test it on the options' prompts.

    Decoding runs on the thread count `kernels_ref.threads.choose_threads` picks for the pair's
    size, or on `options.threads`; the report says which and why. Loading and decoding are
    stages of `progress`. Raises `InputError` for a missing folder, a malformed file, a drafter
    that does not match its target, an unavailable device, or `cuda_graphs` off CUDA.
    """
    torch_device = parse_device(options.device)
    if options.cuda_graphs and torch_device.type != "cuda":
        raise InputError("--cuda-graphs needs --device cuda")
    target_dir, drafter_dir = Path(options.target), Path(options.drafter)
    with stage(progress, f"loading {target_dir} and {drafter_dir}"):
        target = load_target(target_dir, torch_device, options.dtype)
        drafter = load_drafter(drafter_dir, target, torch_device, options.dtype)
        tokenizer = load_tokenizer(target_dir)
        prompt_set = load_prompts(
            options.prompts or DEFAULT_PROMPTS, tokenizer, target.config.vocab_size, target_dir
        )
    choice = choose_threads(count_parameters(target, drafter), requested=options.threads)
    with using_threads(choice):
        report = difftest_models(
            target,
            drafter,
            prompt_set,
            stop_ids=default_stop_ids(target_dir),
            tokenizer=tokenizer,
            max_new_tokens=options.max_new_tokens,
            block_size=options.block_size,
            inject=options.inject,
            cuda_graphs=options.cuda_graphs,
            progress=progress,
        )
    return replace(report, threads=choice)
