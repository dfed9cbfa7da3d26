"""The engine and sampler bugs `--inject` can plant, to prove the diff tests catch them.

Torch-free, so a CLI can list and parse the names without importing torch. Text becomes a
`Fault` once, where it enters (`Fault.parse`); everything past that point takes the enum.
"""

from __future__ import annotations

from enum import StrEnum

from kernels_ref.errors import RunnerError

GREEDY = "greedy"  # planted in the greedy draft-verify loop
SAMPLER = "sampler"  # planted in the rejection sampler
SAMPLED_DRAFT = "sampled-draft"  # in the rejection sampler, and only with a sampled draft
SERVE = "serve"  # in `kernels_ref.serve`'s request handling: shows only across requests


class Fault(StrEnum):
    """One planted bug: its `--inject` name, what it breaks, and where it lives."""

    ACCEPT_OFF_BY_ONE = (
        "accept-off-by-one", GREEDY, "one draft token more than matched is accepted"
    )
    NO_CUMPROD = (
        "no-cumprod", GREEDY,
        "matches are counted, not prefixed: a later match is accepted after a mismatch",
    )
    SEQ_INFLATION = (
        "seq-inflation", GREEDY,
        "the drafter's context advances by the drafted, not the accepted, count",
    )
    STALE_KV = "stale-kv", GREEDY, "the target KV cache is not cropped after a rejection"
    SKIP_BONUS = (
        "skip-bonus", GREEDY, "the bonus token becomes the next anchor but is never emitted"
    )
    DROP_MASK_ID = "drop-mask-id", GREEDY, "output tokens equal to mask_token_id are dropped"
    MISSED_STOP = (
        "missed-stop", GREEDY,
        "a stop token among the accepted drafts is ignored (only the bonus is checked)",
    )
    HIDDEN_OFFSET = (
        "hidden-offset", GREEDY,
        "context features are read one layer early (the residual entering the layer)",
    )
    SELECTOR_NO_UNARY = (
        "selector-no-unary", GREEDY,
        "DFlash 2 only: the candidate selector ranks the top-k by pairwise score alone "
        "(the drafter's logits are dropped)",
    )
    REUSE_DRAFT_UNIFORMS = (
        "reuse-draft-uniforms", SAMPLED_DRAFT,
        "the accept test reuses the drafter's random numbers (a published bug)",
    )
    REUSE_ACCEPT_UNIFORM = (
        "reuse-accept-uniform", SAMPLER,
        "the residual is sampled with the uniform that decided the rejection",
    )
    RESAMPLE_FROM_P = (
        "resample-from-p", SAMPLER,
        "after a rejection, resample from p instead of normalised max(0, p - q)",
    )
    PREFIX_CACHE_FIRST_BLOCK = (
        "prefix-cache-first-block", SERVE,
        "the prefix cache matches an entry by its first 16-token block only and reuses the "
        "entry's whole prompt: a request decodes another tenant's prompt that opened alike",
    )

    where: str
    description: str

    def __new__(cls, name: str, where: str, description: str) -> Fault:
        member = str.__new__(cls, name)
        member._value_ = name
        member.where = where
        member.description = description
        return member

    @property
    def greedy(self) -> bool:
        """Planted in the greedy draft-verify loop."""
        return self.where == GREEDY

    @property
    def dflash2_only(self) -> bool:
        """Planted in a DFlash 2 drafter's candidate selector (`kernels_ref.drafter2`)."""
        return self is Fault.SELECTOR_NO_UNARY

    @property
    def sampling(self) -> bool:
        """Planted in the rejection sampler."""
        return self.where in (SAMPLER, SAMPLED_DRAFT)

    @property
    def runner(self) -> bool:
        """The KV-cached runner can show it (it drafts greedily: no drafting random numbers)."""
        return self.where in (GREEDY, SAMPLER)

    @property
    def serve_only(self) -> bool:
        """Planted in `kernels_ref.serve` between requests (one decode alone never shows it)."""
        return self.where == SERVE

    @classmethod
    def parse(cls, name: str) -> Fault:
        """The fault called `name`, raising `RunnerError` listing the known names."""
        # A loop, not `cls(name)`: with the three-argument `__new__` mypy takes that value
        # lookup for a construction.
        for fault in cls:
            if fault == name:
                return fault
        known = ", ".join(cls)
        raise RunnerError(f"unknown fault {name!r}; known faults: {known}")
