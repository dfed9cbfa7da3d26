"""One prompt's diff outcome, shared by the local (reference runner) and endpoint diffs.

Both compare a reference decode (autoregressive, or the baseline engine) with a candidate decode
(speculative, or the candidate engine) and report the first divergence: where, both tokens, and
the reference's top-1 minus top-2 margin there. A small margin where the candidate took the
runner-up is a `near-tie` (rounding can flip it); any other divergence is `hard`. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

Token = int | str  # a token id, or a token's text when the engine gives no ids


class Status(StrEnum):
    """How one prompt's two decodes compare."""

    identical = "identical"
    near_tie = "near-tie"
    hard = "hard"


@dataclass(frozen=True)
class Divergence:
    """Where and how a candidate decode first leaves the reference decode."""

    position: int | None  # first differing token; None: same tokens, different text
    reference_token: Token | None  # None: that decode had ended there
    candidate_token: Token | None
    margin: float | None  # the reference's top-1 minus top-2 score at `position`
    near_tie: bool = False
    candidate_margin: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class SpeculationStats:
    """Acceptance of one prompt's speculative decode (the local diff sees the steps)."""

    tau: float  # mean tokens committed per speculative step
    steps: int
    target_forwards_ar: int
    target_forwards_spec: int
    histogram: dict[str, int]  # committed tokens per step -> count
    acceptance: tuple[int, ...] = ()  # per step, tokens committed (z-lab's acceptance_lengths)
    stop_reason: str = "length"  # why the reference decode ended: length, stop or context


@dataclass(frozen=True)
class PromptResult:
    """The comparison of one prompt's reference and candidate decodes."""

    prompt_id: str
    divergence: Divergence | None  # None: identical
    compared_by: str = "token_ids"  # "token_ids" | "token_texts" | "text"
    reference_length: int = 0
    candidate_length: int = 0
    reference_text: str = ""
    candidate_text: str = ""
    speculation: SpeculationStats | None = None
    prompt_ids: tuple[int, ...] = ()  # the token ids both decodes were fed, when known
    output_ids: tuple[int, ...] = ()  # the reference decode's token ids, when known

    @property
    def identical(self) -> bool:
        return self.divergence is None

    @property
    def status(self) -> Status:
        if self.divergence is None:
            return Status.identical
        return Status.near_tie if self.divergence.near_tie else Status.hard

    def divergence_fields(self) -> dict[str, Any]:
        """The divergence's fields, all None (and no near-tie) when identical."""
        d = self.divergence or Divergence(None, None, None, None)
        return {
            "position": d.position,
            "reference_token": d.reference_token,
            "candidate_token": d.candidate_token,
            "margin": d.margin,
            "candidate_margin": d.candidate_margin,
            "near_tie": d.near_tie,
            "detail": d.detail,
        }


def first_difference(reference: Sequence[Any], candidate: Sequence[Any]) -> int | None:
    """The first index where the sequences differ (the shorter length when one is a prefix of
    the other); None when they are equal."""
    for index, (left, right) in enumerate(zip(reference, candidate, strict=False)):
        if left != right:
            return index
    return None if len(reference) == len(candidate) else min(len(reference), len(candidate))


def token_at(tokens: Sequence[Token], position: int) -> Token | None:
    """`tokens[position]`, or None past the end (that decode had ended)."""
    return tokens[position] if position < len(tokens) else None


class ClassifiedResults:
    """A report's `results` by status: mixed into the endpoint, reference and isolation reports
    (frozen dataclasses with a `results` field). `passed` is each report's own."""

    results: tuple[PromptResult, ...]

    @property
    def identical(self) -> bool:
        """Every prompt gave the same tokens on both sides (a fact beside `passed`)."""
        return all(r.status is Status.identical for r in self.results)

    @property
    def hard_divergences(self) -> tuple[PromptResult, ...]:
        return tuple(r for r in self.results if r.status is Status.hard)

    @property
    def near_ties(self) -> tuple[PromptResult, ...]:
        return tuple(r for r in self.results if r.status is Status.near_tie)
