"""Is the engine drafting with the locked drafter? Its acceptance against kernels_ref's.

A lossless engine commits the target's tokens whatever drafts it verifies, so a drafter swapped for
another changes neither the tokens nor their logprobs, and no engine API names the drafter it
loaded (vLLM's `/v1/models` and llama.cpp's `/props` name the target only, in the engine's own
words). What a drafter changes is how many of its tokens the target accepts. kernels_ref decodes
the same prompts speculatively with the locked drafter; the engine's mean acceptance length over
the diff (its Prometheus counters) must reach `MIN_TAU_RATIO` of kernels_ref's. A drafter as good
as the locked one passes: this shows the engine's drafts are accepted like the locked drafter's,
not that they are its (docs/diff-testing.md, "What proves the drafter"). Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# The engine's tau over the diff may fall this far below kernels_ref's with the locked drafter.
# Measured on the built-in pair over the shipped prompts (docs/diff-testing.md): the locked
# drafter 1.02 to 1.05 times kernels_ref's on vLLM, 1.10 on llama.cpp, 1.02 on kernels_ref.serve;
# a swapped one (the rows of its matrices shuffled) 0.27 to 0.33 on all three.
MIN_TAU_RATIO = 0.75

WRONG_DRAFTER = "the engine does not draft like the locked drafter"


@dataclass(frozen=True)
class DrafterCheck:
    """The engine's mean acceptance length over the diff against kernels_ref's with the locked
    drafter on the same prompts and budgets."""

    reference_tau: float
    engine_tau: float | None  # None: the engine counted no drafts over the diff
    min_ratio: float = MIN_TAU_RATIO

    @property
    def ratio(self) -> float | None:
        if self.engine_tau is None or not self.reference_tau > 0:
            return None
        return self.engine_tau / self.reference_tau

    @property
    def passed(self) -> bool:
        """The engine drafted, and its tau reached `min_ratio` of the reference's (a figure
        that is not a finite number proves nothing)."""
        ratio = self.ratio
        return ratio is not None and math.isfinite(ratio) and ratio >= self.min_ratio

    def reason(self) -> str | None:
        """Why the engine is not drafting with the locked drafter (None when it passed)."""
        if self.passed:
            return None
        if self.ratio is None or not math.isfinite(self.ratio):
            return (f"the engine counted no drafts over the diff (its tau: {self.engine_tau}; "
                    f"kernels_ref's with the locked drafter: {self.reference_tau:.3g}): it "
                    "cannot be shown to draft with the locked drafter")
        assert self.engine_tau is not None
        return (f"{WRONG_DRAFTER}: its mean acceptance length over the diff is "
                f"{self.engine_tau:.3g}, {self.ratio:.2f} times kernels_ref's "
                f"{self.reference_tau:.3g} with the locked drafter on the same prompts (at least "
                f"{self.min_ratio:g} expected)")

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {"passed": self.passed, "reference_tau": round(self.reference_tau, 4),
                "engine_tau": _rounded(self.engine_tau),
                "ratio": _rounded(ratio), "min_ratio": self.min_ratio}


def _rounded(value: float | None) -> float | str | None:
    """JSON has no infinity or NaN: those are written as strings."""
    if value is None:
        return None
    return round(value, 4) if math.isfinite(value) else str(value)
