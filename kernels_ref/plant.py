"""Planting a `Fault`: each `--inject` bug as a substitute for one part of a correct decode.

The decode loop (`kernels_ref.loop`) and the models name no fault. A fault is planted by handing
the loop a different part: an accept rule for `GreedyVerifier`, `Hooks` with one decision
changed, `SamplerHooks` with one choice changed, or a DFlash 2 candidate selector whose
`unary_weight` is zeroed while the decode runs. `plant` picks the part for a fault.
`prefix-cache-first-block` lives between requests: `kernels_ref.serve` rewrites each prompt
through a `FirstBlockPrefixCache`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from kernels_ref.drafter2 import CandidateSelector, Drafter2
from kernels_ref.errors import RunnerError
from kernels_ref.faults import Fault
from kernels_ref.loop import AcceptRule, DraftModel, Hooks, longest_prefix
from kernels_ref.model import KVCache
from kernels_ref.sampling import SamplerHooks

# ----------------------------------------------------------------------------- accept rules


def accept_one_more(drafts: list[int], choices: list[int]) -> int:
    """accept-off-by-one: one draft more than matched (while there is one)."""
    return min(longest_prefix(drafts, choices) + 1, len(drafts))


def count_matches(drafts: list[int], choices: list[int]) -> int:
    """no-cumprod: every matching draft counts, even after a mismatch."""
    return sum(d == c for d, c in zip(drafts, choices, strict=False))


ACCEPT_RULES: dict[Fault, AcceptRule] = {
    Fault.ACCEPT_OFF_BY_ONE: accept_one_more,
    Fault.NO_CUMPROD: count_matches,
}


def accepted_prefix(drafts: list[int], choices: list[int], fault: Fault | None) -> int:
    """How many drafts the greedy verifier accepts with `fault` planted (None: correct)."""
    rule = ACCEPT_RULES.get(fault, longest_prefix) if fault is not None else longest_prefix
    return rule(drafts, choices)


# ----------------------------------------------------------------------------- loop hooks


class HiddenOffset(Hooks):
    """hidden-offset: context features are read one layer early (the layer's input)."""

    feature_offset = 0


class StaleKV(Hooks):
    """stale-kv: rejected drafts stay in the target's cache (it is never cropped)."""

    def room(self, prompt: int, budget: int, block: int) -> int:
        return prompt + budget * block  # every verified position stays

    def crop(self, cache: KVCache, length: int) -> None:
        pass


class SeqInflation(Hooks):
    """seq-inflation: the drafter's context advances by the drafted, not the accepted, count."""

    def room(self, prompt: int, budget: int, block: int) -> int:
        return prompt + budget * block  # every drafted position joins the context

    def context_rows(self, accepted: int, block: int) -> int:
        return block


class SkipBonus(Hooks):
    """skip-bonus: the bonus token becomes the next anchor but is never emitted."""

    def emits(self, token: int, is_bonus: bool) -> bool:
        return not is_bonus


class DropMaskId(Hooks):
    """drop-mask-id: output tokens equal to the drafter's `mask_token_id` are dropped."""

    def __init__(self, mask_id: int) -> None:
        self.mask_id = mask_id

    def emits(self, token: int, is_bonus: bool) -> bool:
        return token != self.mask_id


class MissedStop(Hooks):
    """missed-stop: a stop token among the accepted drafts is ignored (only the bonus ends)."""

    def stops(self, token: int, is_bonus: bool, stop_ids: frozenset[int]) -> bool:
        return is_bonus and token in stop_ids


def loop_hooks(fault: Fault, mask_id: int) -> Hooks:
    """The loop's hooks with `fault` planted (other faults leave them correct)."""
    planted = {
        Fault.HIDDEN_OFFSET: HiddenOffset,
        Fault.STALE_KV: StaleKV,
        Fault.SEQ_INFLATION: SeqInflation,
        Fault.SKIP_BONUS: SkipBonus,
        Fault.MISSED_STOP: MissedStop,
    }
    if fault is Fault.DROP_MASK_ID:
        return DropMaskId(mask_id)
    return planted.get(fault, Hooks)()


# ----------------------------------------------------------------------------- sampler hooks


class ReuseDraftUniforms(SamplerHooks):
    """reuse-draft-uniforms: the accept test reuses the drafter's random numbers."""

    def accept_uniforms(
        self, fresh: torch.Tensor, draft_uniforms: torch.Tensor | None
    ) -> torch.Tensor:
        if draft_uniforms is None:
            raise ValueError("reuse-draft-uniforms needs a sampled (non-greedy) draft")
        return draft_uniforms


class ReuseAcceptUniform(SamplerHooks):
    """reuse-accept-uniform: the residual is drawn with the uniform that decided the rejection."""

    def next_uniforms(
        self, fresh: torch.Tensor, uniforms: torch.Tensor, accepted: torch.Tensor
    ) -> torch.Tensor:
        k = uniforms.shape[1]
        if k == 0:
            return fresh
        decisive = uniforms[torch.arange(len(accepted)), accepted.clamp(max=k - 1)]
        return torch.where(accepted < k, decisive, fresh)


class ResampleFromP(SamplerHooks):
    """resample-from-p: after a rejection, draw from p instead of normalised max(0, p - q)."""

    def residual(self, p_next: torch.Tensor, q_next: torch.Tensor) -> torch.Tensor:
        return p_next


def sampler_hooks(fault: Fault | None) -> SamplerHooks:
    """The rejection sampler's hooks with `fault` planted (other faults leave them exact)."""
    planted = {
        Fault.REUSE_DRAFT_UNIFORMS: ReuseDraftUniforms,
        Fault.REUSE_ACCEPT_UNIFORM: ReuseAcceptUniform,
        Fault.RESAMPLE_FROM_P: ResampleFromP,
    }
    hooks = planted.get(fault, SamplerHooks) if fault is not None else SamplerHooks
    return hooks()


# ----------------------------------------------------------------------------- the server

PREFIX_BLOCK = 16  # tokens per prefix-cache block (vLLM's default block size)


class FirstBlockPrefixCache:
    """prefix-cache-first-block: an entry is found by the prompt's first block alone and its
    whole cached prompt is reused, so a prompt that opens like an earlier request's is decoded
    as that request's prompt (plus its own tokens past it). A request alone, or after requests
    that open differently, is decoded right: only another tenant shows it."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, ...], list[int]] = {}
        self._lock = threading.Lock()  # requests run concurrently

    def __call__(self, prompt: list[int]) -> list[int]:
        """The prompt this request is decoded as."""
        if len(prompt) < PREFIX_BLOCK:
            return prompt
        key = tuple(prompt[:PREFIX_BLOCK])
        with self._lock:
            cached = self._entries.get(key, prompt)
            self._entries[key] = prompt
        return cached + prompt[len(cached) :]


def decode_fault(fault: Fault | None, greedy: bool) -> Fault | None:
    """The part of a server's planted `fault` one request's decode carries: greedy-loop faults
    show in greedy requests only, sampler faults in sampled ones, server faults in none."""
    if fault is None or fault.serve_only or fault.greedy != greedy:
        return None
    return fault


# ----------------------------------------------------------------------------- one decode


@dataclass(frozen=True)
class Plant:
    """The parts one decode runs with: a correct engine's unless a fault swaps one."""

    accept: AcceptRule = longest_prefix
    hooks: Hooks = field(default_factory=Hooks)
    sampler: SamplerHooks = field(default_factory=SamplerHooks)
    selector: CandidateSelector | None = None  # run without its unary (logit) score

    @contextmanager
    def planted(self) -> Iterator[None]:
        """Zero the selector's `unary_weight` while the decode runs, and restore it after."""
        if self.selector is None:
            yield
            return
        self.selector.unary_weight.zero_()
        try:
            yield
        finally:
            self.selector.unary_weight.fill_(1.0)


def plant(fault: Fault | None, *, greedy: bool, drafter: DraftModel) -> Plant:
    """The parts of a decode with `fault` planted (greedy or sampled), refusing a fault the
    decode cannot show and a DFlash 2 fault on another drafter."""
    if fault is None:
        return Plant()
    if greedy and not fault.greedy:
        raise ValueError(f"{fault} is a sampler fault: it needs a temperature above 0")
    if not greedy and not (fault.sampling and fault.runner):
        reason = "a greedy-loop fault" if fault.greedy else "it needs a sampled draft"
        raise ValueError(f"{fault} cannot be planted in the sampled loop: {reason}")
    selector = None
    if fault.dflash2_only:
        if not isinstance(drafter, Drafter2):
            raise RunnerError(f"fault {fault} needs a DFlash 2 drafter (DFlash2DraftModel)")
        selector = drafter.candidate_selector
    return Plant(
        accept=ACCEPT_RULES.get(fault, longest_prefix),
        hooks=loop_hooks(fault, drafter.config.mask_token_id),
        sampler=sampler_hooks(fault),
        selector=selector,
    )
