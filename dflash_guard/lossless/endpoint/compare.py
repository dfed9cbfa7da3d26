"""Comparing two completions of one prompt: identical, a near-tie, or a hard divergence.

On the first differing token the baseline's `top_logprobs` give the margin between its two best
candidates: when that margin is under a threshold and the candidate picked the baseline's
runner-up, the divergence is a `near-tie` (a bf16 verify kernel may flip it; reported and
counted, a policy decides); any other divergence is `hard` (a logic bug until shown otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from dflash_guard.lossless.endpoint.client import Completion
from dflash_guard.lossless.result import (
    Divergence,
    PromptResult,
    Token,
    first_difference,
    token_at,
)
from dflash_guard.near_tie import ENGINE, NEAR_TIE_MARGIN, judge_near_tie


def compare_completions(
    prompt_id: str,
    baseline: Completion,
    candidate: Completion,
    *,
    near_tie_margin: float = NEAR_TIE_MARGIN[ENGINE],
    compare_text: bool = True,
    logprobs_agree: Callable[[int], bool] | None = None,
) -> PromptResult:
    """Compare two completions of one prompt; classify the first divergence (`judge_near_tie`).
    With `compare_text` off, equal tokens are identical whatever text each side rendered (the
    reference runner's diff: the engine's detokenizer is not what it checks). `logprobs_agree`
    says whether the engine's logprobs up to a position agree with the reference's (the
    reference diff: a near-tie is one only there)."""
    left: Sequence[Token]
    right: Sequence[Token]
    if baseline.token_ids is not None and candidate.token_ids is not None:
        by, left, right = "token_ids", baseline.token_ids, candidate.token_ids
    elif baseline.token_texts is not None and candidate.token_texts is not None:
        by, left, right = "token_texts", baseline.token_texts, candidate.token_texts
    else:
        by, left, right = "text", tuple(baseline.text), tuple(candidate.text)

    def result(divergence: Divergence | None) -> PromptResult:
        return PromptResult(prompt_id, divergence, by,
                            reference_length=len(left), candidate_length=len(right))

    position = first_difference(left, right)
    if position is None:
        if compare_text and by != "text" and baseline.text != candidate.text:
            mismatch = Divergence(None, None, None, None, detail="same tokens but different text")
            return result(mismatch)
        return result(None)
    base_token, cand_token = token_at(left, position), token_at(right, position)
    if by == "text":
        text = Divergence(position, base_token, cand_token, None,
                          detail="no token logprobs: compared text characters")
        return result(text)

    reported = baseline.at(position)
    margin = reported.margin
    if base_token is None or cand_token is None:
        near_tie, detail = False, "one completion ended earlier (stop token or length)"
    else:
        near_tie, detail = judge_near_tie(
            margin, near_tie_margin, took_runner_up=cand_token == reported.runner_up,
            logprobs_agree=None if logprobs_agree is None else logprobs_agree(position))
    divergence = Divergence(position, base_token, cand_token, margin, near_tie,
                            candidate.at(position).margin, detail)
    return result(divergence)


def until_stop(completion: Completion, stop_ids: frozenset[int]) -> Completion:
    """`completion` up to its first stop token, which is left out: kernels_ref and vLLM emit
    it and stop, llama.cpp leaves it out, or emits it and decodes on when it ignores
    `stop_token_ids`; on every engine the decode ended there."""
    ids = completion.token_ids
    end = next((i for i, token in enumerate(ids or ()) if token in stop_ids), None)
    if ids is None or end is None:
        return completion
    return replace(completion, token_ids=ids[:end],
                   token_texts=None if completion.token_texts is None
                   else completion.token_texts[:end],
                   logprobs=completion.logprobs[:end])


def result_json(result: PromptResult) -> dict[str, Any]:
    """One prompt in the endpoint report's JSON (field names predate the shared type)."""
    d = result.divergence_fields()
    return {
        "prompt_id": result.prompt_id,
        "status": str(result.status),
        "compared_by": result.compared_by,
        "position": d["position"],
        "baseline_token": d["reference_token"],
        "candidate_token": d["candidate_token"],
        "margin": d["margin"],
        "candidate_margin": d["candidate_margin"],
        "baseline_length": result.reference_length,
        "candidate_length": result.candidate_length,
        "detail": d["detail"],
    }
