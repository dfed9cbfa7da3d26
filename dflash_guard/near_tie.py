"""The near-tie, decided in one place: where a candidate decode left the reference decode only
because the reference's two best tokens were within rounding of each other.

At the first divergence, the reference's top-1 minus top-2 score (a logit margin, which equals the
logprob margin in nats) is held against a threshold of the precision the decodes ran in. Under it,
and where the candidate took the reference's runner-up (and, in a reference diff, the engine's
logprobs up to there agree with the reference's), the divergence is a near-tie: counted, and a
policy decides. Any other divergence is hard. Torch-free, below every room that diffs or judges.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

ENGINE = "engine"  # the threshold's key when two engines are compared (precision not known)

# The threshold (nats) under which a divergence can be a near-tie, per precision. The reference
# runner's own two decodes (block verification against single-token decoding) round differently
# by the dtype they compute in; two engines, or an engine against the reference, are compared at
# `ENGINE`, whatever each computes in (the endpoint diffs' and the policy's default).
NEAR_TIE_MARGIN: Mapping[str, float] = MappingProxyType({
    "float64": 1e-9,
    "float32": 1e-4,
    "float16": 0.02,
    "bfloat16": 0.125,
    ENGINE: 0.05,
})


def judge_near_tie(margin: float | None, threshold: float, *, took_runner_up: bool = True,
                   logprobs_agree: bool | None = None) -> tuple[bool, str]:
    """Whether a divergence at the reference's top-2 `margin` is a near-tie, and why (empty when
    the margin says nothing). `took_runner_up`: the candidate's token is the reference's second
    best (the local diff records only the margin, so it passes the default). `logprobs_agree`:
    the engine's logprobs up to the divergence agree with the reference's within the tolerance
    (None: not checked); where they do not, a small margin excuses nothing."""
    if margin is None:
        return False, "baseline gave no top-2 logprobs at the divergence"
    if not margin < threshold:
        return False, ""
    if not took_runner_up:
        return False, "small margin, but the candidate's token is not the baseline's runner-up"
    why = f"candidate took the baseline's runner-up at margin {margin:.4f} nats"
    if logprobs_agree is None:
        return True, why
    if logprobs_agree:
        return True, why + "; the logprobs agree within the tolerance"
    return False, (why + ", but the engine's logprobs there are not the reference's within the "
                   "tolerance (or were not reported)")
