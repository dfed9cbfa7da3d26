"""Is the served model the locked one? The engine's logprobs against the reference runner's.

Greedy tokens agree on a slightly different model (a drifted weight, a wrong shard, a merged LoRA);
the logprobs do not. The engine reports, at each position it committed, its token's logprob and
its top-k; kernels_ref gives the same values for the same context (`kernels_ref.logprobs`: the
prompt, then the engine's own tokens fed back, so positions past a divergence compare too). The
largest absolute difference, in nats, is held against a tolerance: the one measured for the
precision the engine serves (docs/diff-testing.md), or the one a policy or the command gives.
Past it, the served model is not the locked one. Torch-free: the reference values come in as
plain numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.lossless.endpoint.client import Completion

# The largest |engine - kernels_ref| logprob difference (nats) allowed per precision: each is the
# largest measured on the locked built-in pair over the shipped prompts (3,115 values), on every
# engine measured, times 2 to 2.5 (docs/diff-testing.md, "The logprob check"). A 2% drift of one
# MLP matrix moved it 0.199 on kernels_ref, vLLM and llama.cpp: caught at float32 and float16, not
# at bfloat16, whose own rounding moves it 0.30 when the engine computes in bfloat16, nor at q8_0
# (its 32-value blocks on the pair's 64-wide rows: 0.324, and 3 of 12 greedy streams diverge).
TOLERANCES: dict[str, float] = {
    "float32": 0.05,  # llama.cpp f32 GGUF 0.0204, vLLM 2.2e-5, kernels_ref.serve 1.1e-5
    "float16": 0.08,  # kernels_ref.serve in float16 0.037, llama.cpp f16 GGUF 0.0217
    "bfloat16": 0.6,  # kernels_ref.serve in bfloat16 0.30, llama.cpp bf16 GGUF 0.064
    "q8_0": 0.8,  # llama.cpp q8_0 GGUF 0.324 (the drifted target's q8_0: 0.347)
}


WRONG_MODEL = "the served model is not the locked one"
# llama.cpp's speculative path commits each token it accepts with probability 1 and no top-k
# ("result.prob = 1.0f; // set later", "TODO: set result.probs" in its server-context.cpp): a
# placeholder, not a measurement. An engine that computed a logprob of exactly 0 reports its
# alternatives with it.
PLACEHOLDER = 0.0


def tolerance_for(precision: str) -> float:
    """The measured tolerance of `precision`; `InputError` for one never measured."""
    try:
        return TOLERANCES[precision]
    except KeyError:
        raise InputError(
            f"no measured logprob tolerance for precision {precision!r} (measured: "
            f"{', '.join(TOLERANCES)}): give --max-logprob-delta, or difftest.max_logprob_delta "
            "in the policy") from None


@dataclass(frozen=True)
class LogprobDelta:
    """One compared value: the engine's and the reference's logprob of `token` at `position`."""

    prompt_id: str
    position: int
    token: int
    engine: float
    reference: float
    committed: bool  # the engine's own token there (else one of its top-k)

    @property
    def delta(self) -> float:
        """|engine - reference| in nats; infinite when one side is not a finite number."""
        if self.engine == self.reference:
            return 0.0
        value = abs(self.engine - self.reference)
        return value if math.isfinite(value) else math.inf

    def to_json(self) -> dict[str, Any]:
        return {"prompt_id": self.prompt_id, "position": self.position, "token": self.token,
                "engine": _finite(self.engine), "reference": _finite(self.reference),
                "delta": _finite(self.delta), "committed": self.committed}


@dataclass(frozen=True)
class PromptLogprobs:
    """One prompt's comparison: how many positions had engine logprobs, and the worst value."""

    prompt_id: str
    positions: int  # positions the engine committed (after the stop cut)
    compared_positions: int  # of those, with logprobs the engine reported
    values: int  # values compared (committed tokens and top-k alternatives)
    worst: LogprobDelta | None
    per_position: tuple[tuple[int, float], ...] = ()  # (position, its largest difference)
    placeholders: int = 0  # positions with probability 1 and no top-k: nothing was measured

    @property
    def max_delta(self) -> float | None:
        return None if self.worst is None else self.worst.delta

    def within(self, position: int, tolerance: float) -> bool:
        """Whether the engine's logprobs up to `position` were reported there and agree within
        `tolerance` (what makes a near-tie there benign)."""
        deltas = dict(self.per_position)
        if position not in deltas:
            return False
        return all(d <= tolerance for p, d in deltas.items() if p <= position)


def is_placeholder(answer: Completion, position: int) -> bool:
    """Whether the engine's logprob at `position` is a placeholder (`PLACEHOLDER` with no
    top-k beside it), not a measurement."""
    reported = answer.at(position)
    return reported.logprob == PLACEHOLDER and not reported.top


def compare_prompt(prompt_id: str, answer: Completion,
                   reference: Sequence[Mapping[int, float]]) -> PromptLogprobs:
    """The engine's logprobs in `answer` against `reference` (per position, the reference's
    logprob of every token the engine reported there); positions past `reference` (the
    target's context, or an id outside its vocabulary) are not compared."""
    ids = (answer.token_ids or ())[: len(reference)]
    worst: LogprobDelta | None = None
    compared = values = placeholders = 0
    per_position: list[tuple[int, float]] = []
    for position, token in enumerate(ids):
        reported: list[tuple[int, float, bool]] = []
        here = answer.at(position)
        if is_placeholder(answer, position):
            placeholders += 1
            continue
        if here.logprob is not None:
            reported.append((token, here.logprob, True))
        reported += [(t, v, False) for t, v in here.top if isinstance(t, int) and t != token]
        if not reported:
            continue
        compared += 1
        largest = 0.0
        for alternative, value, committed in reported:
            ours = reference[position].get(alternative)
            if ours is None:
                continue
            values += 1
            delta = LogprobDelta(prompt_id, position, alternative, value, ours, committed)
            largest = max(largest, delta.delta)
            if worst is None or delta.delta > worst.delta:
                worst = delta
        per_position.append((position, largest))
    return PromptLogprobs(prompt_id, len(ids), compared, values, worst, tuple(per_position),
                          placeholders)


def tokens_reported(answer: Completion) -> list[set[int]]:
    """Per committed position, the token ids whose logprob the engine reported there (what the
    reference must give values for)."""
    ids = answer.token_ids or ()
    wanted = []
    for position, token in enumerate(ids):
        wanted.append({token} | {t for t, _ in answer.at(position).top if isinstance(t, int)})
    return wanted


@dataclass(frozen=True)
class LogprobCheck:
    """The served model against the locked one, by logprobs over every prompt."""

    tolerance: float  # nats
    tolerance_from: str  # "float32 (measured)", "--max-logprob-delta", the policy ...
    prompts: tuple[PromptLogprobs, ...]
    remeasured: int = 0  # placeholders the engine measured on a one-token request instead

    @property
    def worst(self) -> LogprobDelta | None:
        found = [p.worst for p in self.prompts if p.worst is not None]
        return max(found, key=lambda d: d.delta) if found else None

    @property
    def values(self) -> int:
        return sum(p.values for p in self.prompts)

    @property
    def placeholders(self) -> int:
        return sum(p.placeholders for p in self.prompts)

    @property
    def positions(self) -> int:
        return sum(p.positions for p in self.prompts)

    @property
    def passed(self) -> bool:
        """Some values compared, none past the tolerance, and no position where the engine
        measured nothing (no logprobs, or placeholders, prove nothing)."""
        return self.reason() is None

    def reason(self) -> str | None:
        """Why the served model is not the locked one (None when it passed)."""
        worst = self.worst
        if worst is None or self.values == 0:
            return ("the engine reported no logprobs the reference could compare: it cannot be "
                    "shown to serve the locked model")
        if worst.delta <= self.tolerance:
            if self.placeholders:
                return (f"the engine measured no logprob at {self.placeholders} of the "
                        f"{self.positions} positions it committed (probability 1, no top-k, as "
                        "llama.cpp's speculative path reports the tokens it accepts, and no "
                        "one-token request measured them either): it cannot be shown to serve "
                        "the locked model there")
            return None
        return (f"{WRONG_MODEL}: at {worst.prompt_id} position "
                f"{worst.position} the logprob of token {worst.token} is {worst.engine:.6g} on "
                f"the engine and {worst.reference:.6g} in the reference, {worst.delta:.3g} nats "
                f"apart (tolerance {self.tolerance:g}, {self.tolerance_from})")

    def to_json(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "passed": self.passed,
            "max_delta": None if worst is None else _finite(worst.delta),
            "where": None if worst is None else worst.to_json(),
            "tolerance": self.tolerance,
            "tolerance_from": self.tolerance_from,
            "values": self.values,
            "placeholders": self.placeholders,
            "remeasured": self.remeasured,
            "prompts": [{"prompt_id": p.prompt_id, "positions": p.positions,
                         "compared_positions": p.compared_positions, "values": p.values,
                         "placeholders": p.placeholders,
                         "max_delta": None if p.max_delta is None else _finite(p.max_delta)}
                        for p in self.prompts],
        }


def _finite(value: float) -> float | str:
    """JSON has no infinity or NaN: those are written as strings."""
    return value if math.isfinite(value) else str(value)
