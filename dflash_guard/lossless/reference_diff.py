"""An engine against the reference runner: the seed's "compare greedy output against the
safetensors path once", and a check of the engine's *autoregressive* path.

kernels_ref decodes every prompt greedily from the safetensors target; the engine (any
OpenAI-compatible server, e.g. llama-server on the converted GGUF) is sent the same token ids at
temperature 0 with logprobs. The two token streams are compared like the endpoint diff's
(`endpoint.compare`): the reference plays the baseline, and its top-2 logit margin at a
divergence (a logit margin equals the logprob margin) tells a near-tie from a hard divergence.
Both decodes end at their first stop token (the target's EOS, a prompt's `stop`), cut here on
both sides: an engine that ignores `stop_token_ids` (llama.cpp) and decodes on is compared on
the same tokens as one that stops. At every position the engine committed, its logprobs (its
token's and its top-k) are held against kernels_ref's for the same context (`logprob_check`):
past the tolerance the served model is not the locked one, and a near-tie counts as one only
where the logprobs agree.
Given the GGUF the engine serves, its tokenizer must be the target's (`gguf_vocab`), else the
diff is refused before any prompt is sent. With `messages` prompts (rendered by us and sent as
ids), the engine's own tokenizer (its `/tokenize`) must encode a set of probe texts as the
target's does and its own rendering of each chat must give our ids (`prompt_match`); else the
diff is refused before any decoding.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

from dflash_guard.fileio import read_input
from dflash_guard.lossless.drafter_check import DrafterCheck
from dflash_guard.lossless.endpoint.client import (
    Completion,
    CompletionClient,
    EndpointError,
    TokenLogprobs,
)
from dflash_guard.lossless.endpoint.compare import compare_completions, result_json, until_stop
from dflash_guard.lossless.endpoint.metrics import (
    AcceptanceFigures,
    ResponseDrafts,
    acceptance_from_metrics,
    acceptance_warnings,
    parse_prometheus,
)
from dflash_guard.lossless.gguf_precision import gguf_precision
from dflash_guard.lossless.gguf_vocab import tokenizer_mismatch
from dflash_guard.lossless.local import mean_acceptance
from dflash_guard.lossless.logprob_check import (
    LogprobCheck,
    compare_prompt,
    is_placeholder,
    tokens_reported,
    tolerance_for,
)
from dflash_guard.lossless.options import ReferenceOptions
from dflash_guard.lossless.prompt_match import (
    engine_prompt_ids,
    engine_tokenizer_mismatch,
    first_mismatch,
)
from dflash_guard.lossless.prompts import Prompt, load_prompts, read_prompts
from dflash_guard.lossless.reference import runner_errors
from dflash_guard.lossless.result import ClassifiedResults, PromptResult
from dflash_guard.outcome import Outcome
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from dflash_guard.trust.comparison import comparison_statement, read_conversion, write_comparison
from kernels_ref.checkpoint import eos_token_ids
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.logprobs import output_logprobs, top_logprobs
from kernels_ref.model import Target
from kernels_ref.prompts import DEFAULT_PROMPTS, MAX_PROMPT_FILE_BYTES, Chat, PromptSpec
from kernels_ref.threads import ThreadChoice, choose_threads, count_parameters, using_threads
from kernels_ref.tokenizer import Tokenizer, load_tokenizer

TOP_K = 2  # the reference's alternatives kept per position: what a near-tie needs
CONVERSION_SUFFIX = ".conversion.json"  # scripts/llamacpp.py writes it beside the GGUF


class Verdict(StrEnum):
    """A reference diff's verdict: the rungs of its ladder, first to last (`verdict`)."""

    refused = "refused"  # nothing compared: the inputs, the engine's tokenizer, no prompt
    wrong_model = "wrong-model"  # its logprobs are not the locked model's
    wrong_drafter = "wrong-drafter"  # its acceptance is not the locked drafter's
    diverged = "diverged"  # a hard divergence
    near_ties = "near-ties"  # near-ties only: counted, a policy decides
    identical = "identical"

    @property
    def passed(self) -> bool:
        return self in (Verdict.near_ties, Verdict.identical)


@dataclass(frozen=True)
class ReferenceDiffReport(ClassifiedResults):
    """The verdict of an engine-vs-reference diff, or the reason it was refused before one."""

    target: str
    candidate: str
    model: str | None
    near_tie_margin: float
    prompt_set: str  # the prompt file's name
    prompt_set_sha256: str
    max_new_tokens: int
    results: tuple[PromptResult, ...] = ()
    refused: str | None = None  # e.g. the GGUF's tokenizer is not the target's
    acceptance: AcceptanceFigures | None = None
    response_drafts: ResponseDrafts | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    threads: ThreadChoice | None = None  # what the reference decode ran on
    logprobs: LogprobCheck | None = None  # the engine's logprobs against the reference's
    drafter: DrafterCheck | None = None  # its acceptance against the locked drafter's (--drafter)

    @property
    def identical(self) -> bool:
        return self.refused is None and all(r.identical for r in self.results)

    @property
    def wrong_model(self) -> str | None:
        """Why the served model is not the locked one, by its logprobs, naming the model the
        endpoint served (None: it is the locked one). The name proves nothing either way: an
        engine serves any weights under any name; the logprobs are the evidence."""
        why = None if self.logprobs is None else self.logprobs.reason()
        if why is None or self.model is None:
            return why
        return f"{why}; the endpoint served it as {self.model!r}"

    @property
    def wrong_drafter(self) -> str | None:
        """Why the engine is not drafting like the locked drafter (None: it is, or no drafter
        was given to check)."""
        return None if self.drafter is None else self.drafter.reason()

    @property
    def verdict(self) -> Verdict:
        """The one ladder, read by the report, its record, the text view and the gate: refused
        (nothing compared, or no logprobs checked), else wrong model, else wrong drafter, else
        a hard divergence, else near-ties or identical."""
        if self.refused is not None or not self.results or self.logprobs is None:
            return Verdict.refused
        if self.wrong_model is not None:
            return Verdict.wrong_model
        if self.wrong_drafter is not None:
            return Verdict.wrong_drafter
        if self.hard_divergences:
            return Verdict.diverged
        return Verdict.identical if self.identical else Verdict.near_ties

    @property
    def passed(self) -> bool:
        """No refusal, no hard divergence, logprobs within the tolerance and, when a drafter
        was checked, its acceptance (near-ties are counted, a policy decides)."""
        return self.verdict.passed

    def outcome(self, engine: str, undrafted: str) -> Outcome:
        """The verdict as a check's outcome, naming `engine` ("the candidate"); `undrafted`
        ends the passing reason when no drafter was checked."""
        verdict = self.verdict
        if verdict is Verdict.refused:
            return Outcome.refused(self.refused or "cannot tell: no prompt was compared")
        if verdict is Verdict.wrong_model:
            return Outcome.refused(f"{engine} does not serve the locked target: "
                                   f"{self.wrong_model}")
        if verdict is Verdict.wrong_drafter:
            return Outcome.refused(f"{engine} does not draft with the locked drafter: "
                                   f"{self.wrong_drafter}")
        if not verdict.passed:
            first = self.hard_divergences[0] if self.hard_divergences else None
            where = f" (first: {first.prompt_id})" if first is not None else ""
            return Outcome.refused(f"{engine} diverges from kernels_ref on the locked target: "
                                   f"{verdict}{where}")
        check, drafter = self.logprobs, self.drafter
        figures = (f"; largest logprob difference {check.worst.delta:.2g} <= "
                   f"{check.tolerance:g} nats" if check is not None and check.worst is not None
                   else "")
        drafted = (f"; drafter: tau {drafter.engine_tau:.2f} against kernels_ref's "
                   f"{drafter.reference_tau:.2f}" if drafter is not None
                   and drafter.engine_tau is not None else undrafted)
        return Outcome.passed(f"{len(self.results)} prompts match kernels_ref on the locked "
                              f"target{figures}{drafted}")

    def summary(self) -> dict[str, Any]:
        """The verdict fields a comparison record's predicate holds."""
        return {
            "verdict": str(self.verdict),
            "passed": self.passed,
            "refused": self.refused,
            "prompts": len(self.results),
            "hard": len(self.hard_divergences),
            "near_ties": len(self.near_ties),
            "near_tie_margin": self.near_tie_margin,
            "divergences": [r.prompt_id for r in self.results if not r.identical],
            "wrong_model": self.wrong_model if self.results else None,
            "logprobs": None if self.logprobs is None else self.logprobs.to_json(),
            "wrong_drafter": self.wrong_drafter if self.results else None,
            "drafter": None if self.drafter is None else self.drafter.to_json(),
            "prompt_set": {"name": self.prompt_set, "digest": {"sha256": self.prompt_set_sha256}},
            "max_new_tokens": self.max_new_tokens,
            "reference": {"runner": "kernels_ref", "target": self.target},
            "engine": {"url": self.candidate, "model": self.model},
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": "reference",
            "target": self.target,
            "candidate": self.candidate,
            "identical": self.identical,
            "passed": self.passed,
            "verdict": str(self.verdict),
            "refused": self.refused,
            "prompts": len(self.results),
            "hard": len(self.hard_divergences),
            "near_ties": len(self.near_ties),
            "near_tie_margin": self.near_tie_margin,
            "prompt_set_sha256": self.prompt_set_sha256,
            "results": [result_json(r) for r in self.results],
            "acceptance": asdict(self.acceptance) if self.acceptance else None,
            "response_drafts": asdict(self.response_drafts) if self.response_drafts else None,
            "warnings": list(self.warnings),
            "threads": None if self.threads is None else self.threads.to_json(),
            "wrong_model": self.wrong_model if self.results else None,
            "logprobs": None if self.logprobs is None else self.logprobs.to_json(),
            "wrong_drafter": self.wrong_drafter if self.results else None,
            "drafter": None if self.drafter is None else self.drafter.to_json(),
        }


def _reference(target: Target, prompt: Prompt, budget: int, stop_ids: frozenset[int]) -> Completion:
    """kernels_ref's greedy autoregressive decode of `prompt` as a `Completion` (its top
    logprobs are filled in by `_with_logprobs`)."""
    run = generate(target, None, list(prompt.ids), max_new_tokens=budget,
                   stop_ids=stop_ids | prompt.stop_ids)
    return Completion("", tuple(run.tokens), None, (), run.stop_reason)


def _reference_tau(options: ReferenceOptions, target: Target, prompts: list[Prompt],
                   budgets: list[int], stop_ids: frozenset[int]) -> float:
    """kernels_ref's mean acceptance length with the locked drafter over the same prompts and
    budgets (its tokens are the target's: only the acceptance is kept)."""
    assert options.drafter is not None
    drafter = load_drafter(options.drafter, target)
    return mean_acceptance([generate(target, drafter, list(p.ids), max_new_tokens=b,
                                     stop_ids=stop_ids | p.stop_ids)
                            for p, b in zip(prompts, budgets, strict=True)])


def _with_logprobs(target: Target, prompt: Prompt, reference: Completion, answer: Completion
                   ) -> tuple[Completion, list[dict[int, float]]]:
    """One teacher-forced pass over the prompt and the engine's tokens: `reference` with its
    top-2 at each of those positions (its own context up to the first divergence, which is
    where a margin is read), and the reference's logprob of every token the engine reported
    at each position."""
    vocab = target.config.vocab_size
    room = target.config.max_position_embeddings - len(prompt.ids)
    tokens = list((answer.token_ids or ())[:max(room, 0)])
    fed = tokens[: next((i for i, t in enumerate(tokens) if not 0 <= t < vocab), len(tokens))]
    rows = output_logprobs(target, list(prompt.ids), fed)
    tops = tuple(TokenLogprobs(top=top_logprobs(rows[i], TOP_K)) for i in range(rows.shape[0]))
    values = [{t: float(rows[i, t]) for t in wanted if 0 <= t < vocab}
              for i, wanted in enumerate(tokens_reported(answer)[: rows.shape[0]])]
    return replace(reference, logprobs=tops), values


def _measure_placeholders(engine: CompletionClient, model: str, prompts: list[Prompt],
                          answers: list[Completion], stop_ids: frozenset[int], room: int,
                          concurrency: int) -> tuple[list[Completion], int]:
    """`answers` with each placeholder logprob (an engine's speculative path that measured
    nothing) replaced by the engine's own measurement there: a one-token request of the prompt
    and the engine's tokens before that position, whose token comes from the engine's
    non-speculative path with its logprobs. Kept a placeholder where that token is not the one
    committed, or past the target's context. Returns the answers and how many were measured."""
    asked: list[tuple[int, int]] = []  # (answer, position)
    for a, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
        cut = until_stop(answer, stop_ids | prompt.stop_ids)
        asked += [(a, i) for i in range(len(cut.token_ids or ()))
                  if is_placeholder(cut, i) and len(prompt.ids) + i < room]

    def ask(item: tuple[int, int]) -> Completion:
        a, i = item
        ids = (*prompts[a].ids, *(answers[a].token_ids or ())[:i])
        return engine.complete(PromptSpec(f"{prompts[a].id}@{i}", ids, 1), model=model,
                               max_tokens=1)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="placeholder") as pool:
        measured = list(pool.map(ask, asked))
    logprobs = [list(a.logprobs) for a in answers]
    filled = 0
    for (a, i), one in zip(asked, measured, strict=True):
        token = (answers[a].token_ids or ())[i]
        if (one.token_ids or ())[:1] != (token,) or one.at(0).logprob is None:
            continue
        logprobs[a][i] = one.at(0)
        filled += 1
    return [replace(answer, logprobs=tuple(found))
            for answer, found in zip(answers, logprobs, strict=True)], filled


def _prompt_mismatch(engine: CompletionClient, specs: list[PromptSpec], prompts: list[Prompt],
                     tokenizer: Tokenizer | None) -> str | None:
    """Why the engine would decode a `messages` prompt from other ids than ours (None when
    every one renders to the same ids on both sides)."""
    for spec, prompt in zip(specs, prompts, strict=True):
        if isinstance(spec.prompt, Chat) and tokenizer is not None:
            theirs = engine_prompt_ids(engine, spec.prompt)
            if mismatch := first_mismatch(prompt.id, prompt.ids, theirs, tokenizer.decode):
                return mismatch.message()
    return None


@runner_errors()
def run_reference_diff(options: ReferenceOptions,
                       progress: Progress = NO_PROGRESS) -> ReferenceDiffReport:
    """Check the GGUF's tokenizer, decode every prompt with kernels_ref and with the engine,
    and compare (loading, decoding and the engine's answers are stages of `progress`). Raises
    `InputError` for unreadable inputs and `EndpointError` for an engine that cannot be used;
    a divergence or a tokenizer mismatch is a result."""
    o = options
    prompts_path = o.prompts or DEFAULT_PROMPTS
    prompt_digest = hashlib.sha256(read_input(Path(prompts_path), "prompt set",
                                              MAX_PROMPT_FILE_BYTES)).hexdigest()
    with stage(progress, f"loading {o.target}"):
        tokenizer = load_tokenizer(o.target)
        target = load_target(o.target, "cpu", o.dtype)
        prompts = load_prompts(prompts_path, tokenizer, target.config.vocab_size, o.target)
    metrics_url = o.candidate.metrics_url
    base = ReferenceDiffReport(
        target=str(o.target), candidate=o.candidate.shown_url, model=o.candidate.model,
        near_tie_margin=o.near_tie_margin, prompt_set=Path(prompts_path).name,
        prompt_set_sha256=prompt_digest, max_new_tokens=o.max_new_tokens)
    if o.gguf is not None and (why := tokenizer_mismatch(o.gguf, o.target)):
        return replace(base, refused=why)
    tolerance, tolerance_from = _tolerance(o)
    stop_ids = frozenset(eos_token_ids(o.target))
    budgets = [min(p.max_new_tokens or o.max_new_tokens, o.max_new_tokens) for p in prompts]
    threads = choose_threads(count_parameters(target), requested=o.threads)

    with o.candidate.client("candidate", pool_size=o.concurrency) as engine:
        model = o.candidate.model or engine.first_model()
        specs = read_prompts(prompts_path, chat=True)
        if any(isinstance(spec.prompt, Chat) for spec in specs) and tokenizer is not None:
            # the engine renders and tokenizes these itself: its tokenizer must be the target's
            why = engine_tokenizer_mismatch(
                engine, lambda text: tokenizer.encode(text, add_special_tokens=False))
            if why or (why := _prompt_mismatch(engine, specs, prompts, tokenizer)):
                return replace(base, model=model, refused=why)
        before = parse_prometheus(engine.get_text(metrics_url)) if metrics_url else None

        def ask(pair: tuple[Prompt, int]) -> Completion:
            prompt, budget = pair
            spec = PromptSpec(prompt.id, tuple(prompt.ids), budget, tuple(sorted(prompt.stop_ids)))
            return engine.complete(spec, model=model, max_tokens=budget)

        with ThreadPoolExecutor(max_workers=o.concurrency, thread_name_prefix="reference") as pool:
            pending = pool.map(ask, zip(prompts, budgets, strict=True))
            references = []
            with (stage(progress, "decoding with kernels_ref", len(prompts), "prompts"),
                  using_threads(threads)):
                for p, b in zip(prompts, budgets, strict=True):
                    references.append(_reference(target, p, b, stop_ids))
                    progress.advanced()
            answers = []
            with stage(progress, "the engine's answers", len(prompts), "prompts"):
                for answer in pending:
                    answers.append(answer)
                    progress.advanced()
        acceptance = None
        if before is not None and metrics_url:
            acceptance = acceptance_from_metrics(before, parse_prometheus(
                engine.get_text(metrics_url)))
        if any(a.token_ids is None for a in answers):
            raise EndpointError(f"candidate endpoint {o.candidate.shown_url} reports no token "
                                "ids (logprobs): the reference diff compares token ids")
        with stage(progress, "measuring the positions the engine left unmeasured"):
            answers, measured = _measure_placeholders(
                engine, model, prompts, answers, stop_ids,
                target.config.max_position_embeddings, o.concurrency)
    drafter = None
    if o.drafter is not None:
        with stage(progress, "decoding with the locked drafter"), using_threads(threads):
            drafter = DrafterCheck(_reference_tau(o, target, prompts, budgets, stop_ids),
                                   acceptance.mean_acceptance_length if acceptance else None)

    results, compared = [], []
    with stage(progress, "the logprobs at every position", len(prompts), "prompts"), \
            using_threads(threads):
        for prompt, reference, answer in zip(prompts, references, answers, strict=True):
            stops = stop_ids | prompt.stop_ids
            reference, answer = until_stop(reference, stops), until_stop(answer, stops)
            reference, values = _with_logprobs(target, prompt, reference, answer)
            logprobs = compare_prompt(prompt.id, answer, values)
            results.append(compare_completions(
                prompt.id, reference, answer, near_tie_margin=o.near_tie_margin,
                compare_text=False,
                logprobs_agree=partial(logprobs.within, tolerance=tolerance)))
            compared.append(logprobs)
            progress.advanced()
    return replace(
        base,
        model=model,
        results=tuple(results),
        logprobs=LogprobCheck(tolerance, tolerance_from, tuple(compared), measured),
        drafter=drafter,
        acceptance=acceptance,
        response_drafts=ResponseDrafts.total(a.drafts for a in answers),
        warnings=tuple(acceptance_warnings(acceptance)) if metrics_url else (),
        threads=threads,
    )


def _tolerance(options: ReferenceOptions) -> tuple[float, str]:
    """The logprob tolerance and where it comes from: the one given, else the one measured for
    the precision given, else for the GGUF's weights, else for float32."""
    if options.max_logprob_delta is not None:
        return options.max_logprob_delta, options.max_logprob_delta_from
    precision = options.precision or (gguf_precision(options.gguf) if options.gguf else None)
    return tolerance_for(precision or "float32"), f"measured for {precision or 'float32'}"


def conversion_record_path(options: ReferenceOptions) -> Path | None:
    """The conversion record to embed: the one given, else `GGUF.conversion.json` when present."""
    if options.conversion is not None or options.gguf is None:
        return options.conversion
    beside = options.gguf.with_name(options.gguf.name + CONVERSION_SUFFIX)
    return beside if beside.is_file() else None


def write_reference_record(options: ReferenceOptions, report: ReferenceDiffReport,
                           out: Path, progress: Progress = NO_PROGRESS) -> None:
    """Write the GGUF comparison record of `report` to `out` (an in-toto statement, atomic),
    as the stage `writing OUT` of `progress` (it hashes the GGUF)."""
    with stage(progress, f"writing {out}"):
        conversion = None
        if (path := conversion_record_path(options)) is not None:
            assert options.gguf is not None
            conversion = read_conversion(path, sha256_file(options.gguf))
        statement = comparison_statement(target_dir=options.target, gguf=options.gguf,
                                         summary=report.summary(), conversion=conversion)
        write_comparison(statement, out)
