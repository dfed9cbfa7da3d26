"""Comparing two completions of one prompt: identical, a near-tie, or a hard divergence.

On the first differing token the baseline's `top_logprobs` give the margin between its two best
candidates: when that margin is under a threshold and the candidate picked the baseline's
runner-up, the divergence is a `near-tie` (a bf16 verify kernel may flip it; reported and
counted, a policy decides); any other divergence is `hard` (a logic bug until shown otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dflash_guard.lossless.endpoint.client import Completion, Token

DEFAULT_NEAR_TIE_MARGIN = 0.05  # nats: |logprob(top1) - logprob(top2)| below this is a near-tie


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


