"""DFlash draft-verify decoding, greedy or sampled; autoregressive decoding is block size 1.

prefill -> [draft a block, verify it with one target forward, commit the accepted drafts plus the
verifier's next token, crop the caches] until the budget or a stop token. The verifier decides
what a step accepts: `GreedyVerifier` (the longest prefix agreeing with the target's argmax) or
`kernels_ref.sampling.RejectionSampler` (exact speculative rejection sampling). A planted `Fault`
changes one decision, through the verifier's accept rule or the loop's `Hooks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from kernels_ref.drafter2 import planted
from kernels_ref.faults import Fault
from kernels_ref.model import Target
from kernels_ref.sampling import RejectionSampler, SamplingParams, seeded
from kernels_ref.step import (
    DraftModel,
    Generation,
    StepRecord,
    commit_context,
    draft_and_verify,
    top2_margin,
)


class Verifier(Protocol):
    """Turns the target's logits into committed tokens."""

    def first(self, logits: Tensor) -> int:
        """The first new token, from the logits `[vocab]` at the prompt's last position."""
        ...

    def verify(self, drafts: list[int], logits: Tensor) -> tuple[int, int]:
        """(drafts accepted, the token after them) from the logits `[1 + len(drafts), vocab]`
        of the target's forward over [anchor, drafts]."""
        ...


def accepted_prefix(drafts: list[int], choices: list[int], fault: Fault | None) -> int:
    """How many drafts the step accepts: the longest prefix agreeing with the target's choices."""
    matches = [d == c for d, c in zip(drafts, choices, strict=False)]
    if fault is Fault.NO_CUMPROD:
        return sum(matches)
    accepted = next((i for i, ok in enumerate(matches) if not ok), len(matches))
    if fault is Fault.ACCEPT_OFF_BY_ONE:
        return min(accepted + 1, len(drafts))
    return accepted


class GreedyVerifier:
    """Greedy verification: accept drafts while they equal the target's argmax."""

    def __init__(self, fault: Fault | None = None) -> None:
        if fault is not None and not fault.greedy:
            raise ValueError(f"{fault} is a sampler fault: it needs a temperature above 0")
        self.fault = fault

    def first(self, logits: Tensor) -> int:
        return int(logits.argmax())

    def verify(self, drafts: list[int], logits: Tensor) -> tuple[int, int]:
        choices = logits.argmax(-1).tolist()  # choices[i]: the target's token after drafts[:i]
        accepted = accepted_prefix(drafts, choices, self.fault)
        return accepted, choices[accepted]


@dataclass(frozen=True)
class Hooks:
    """The loop's fault-prone decisions, correct by default; `hooks_for` plants one fault."""

    feature_offset: int = 1  # context features are hidden_states[L + 1], layer L's output
    crop_rejected: bool = True  # rejected drafts leave the target's KV cache
    advance_by_drafted: bool = False  # the drafter's context grows by the accepted count
    emit_bonus: bool = True
    dropped_token: int | None = None  # a token the engine never emits
    stop_in_drafts: bool = True  # a stop token among the accepted drafts ends decoding

    def context_rows(self, accepted: int, block: int) -> int:
        """Positions of a step the drafter's context takes: anchor + accepted drafts."""
        return block if self.advance_by_drafted else accepted + 1

    def emits(self, token: int, is_bonus: bool) -> bool:
        return (self.emit_bonus or not is_bonus) and token != self.dropped_token

    def stops(self, token: int, is_bonus: bool, stop_ids: frozenset[int]) -> bool:
        return token in stop_ids and (is_bonus or self.stop_in_drafts)


def hooks_for(fault: Fault | None, mask_id: int | None) -> Hooks:
    """The loop's hooks with `fault` planted (accept-rule and sampler faults leave them as is)."""
    planted = {
        Fault.HIDDEN_OFFSET: Hooks(feature_offset=0),
        Fault.STALE_KV: Hooks(crop_rejected=False),
        Fault.SEQ_INFLATION: Hooks(advance_by_drafted=True),
        Fault.SKIP_BONUS: Hooks(emit_bonus=False),
        Fault.DROP_MASK_ID: Hooks(dropped_token=mask_id),
        Fault.MISSED_STOP: Hooks(stop_in_drafts=False),
    }
    return planted.get(fault, Hooks()) if fault is not None else Hooks()


def generate(
    target: Target,
    drafter: DraftModel | None,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    stop_ids: set[int] | frozenset[int],
    static_cache: bool = False,  # preallocated caches (StaticKVCache), the CUDA-graph layout
    block_size: int | None = None,
    inject: Fault | None = None,
    sampling: SamplingParams | None = None,
    seed: int = 0,
) -> Generation:
    """Decode `prompt_ids`: speculative with `drafter`, autoregressive without.

    Greedy unless `sampling` has a temperature above 0: then exact rejection sampling, the
    verifier's random stream seeded with `seed`. Stops after `max_new_tokens`, at the first stop
    token (included in the output) or when the target's context (`max_position_embeddings`) is
    full (`stop_reason` "context"). `inject` plants a fault in the speculative path.

    Acceptance is counted as z-lab's `dflash_generate` counts it (`Generation.acceptance`), and
    its short last block (min(block, left + 1)) is drafted the same way. One deliberate
    difference: z-lab decodes past `max_position_embeddings`; engines do not (vLLM refuses such
    a request, llama.cpp stops at its context), so this loop stops there and says so.
    """
    if static_cache and inject is Fault.STALE_KV:
        raise ValueError("the stale-kv fault needs the growing cache (it never crops)")
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    size = 1 if drafter is None else (block_size or drafter.config.block_size)
    if size < 1:
        raise ValueError("block_size must be at least 1")
    fault = inject if drafter is not None else None
    verifier: Verifier
    if sampling is None or sampling.greedy:
        verifier = GreedyVerifier(fault)
    else:
        verifier = RejectionSampler(sampling, seeded(seed), fault)
    hooks = hooks_for(fault, drafter.config.mask_token_id if drafter is not None else None)
    with torch.inference_mode(), planted(drafter, fault):
        return _decode(
            target, drafter, prompt_ids, max_new_tokens, frozenset(stop_ids), size, verifier,
            hooks, static_cache,
        )


def _decode(
    target: Target,
    drafter: DraftModel | None,
    prompt: list[int],
    max_new_tokens: int,
    stop_ids: frozenset[int],
    size: int,
    verifier: Verifier,
    hooks: Hooks,
    static_cache: bool,
) -> Generation:
    device = target.model.embed_tokens.weight.device
    room = target.config.max_position_embeddings - len(prompt)
    budget = min(max_new_tokens, room)
    at_end = "context" if room < max_new_tokens else "length"  # why decoding ends without a stop
    if budget <= 0:
        return Generation([], [], [], prefill_forwards=0, stop_reason=at_end)
    capacity = len(prompt) + budget  # the positions a static cache must hold
    cache = target.new_cache(static_cache, capacity)
    draft_cache = None
    if drafter is not None:  # a drafter without static caches takes no arguments
        draft_cache = drafter.new_cache(True, capacity) if static_cache else drafter.new_cache()

    # Prefill: the first new token is the verifier's own choice, not counted in acceptance.
    positions = torch.arange(len(prompt), device=device)
    logits, hidden = target(torch.tensor([prompt], device=device), positions, cache)
    commit_context(target, drafter, draft_cache, hidden, len(prompt), 0, hooks.feature_offset)
    generated = [verifier.first(logits[0, -1])]  # the engine's committed tokens
    margins = top2_margin(logits[0, -1:])
    output = [generated[0]] if hooks.emits(generated[0], is_bonus=False) else []  # emitted
    steps: list[StepRecord] = []
    stopped = generated[0] in stop_ids

    while not stopped and len(generated) < budget:
        start = len(prompt) + len(generated) - 1  # position of the anchor
        left = budget - len(generated)
        # As upstream: a short last block still verifies one position past the budget (the
        # drafter attends bidirectionally, so the extra mask changes its drafts); at most
        # `left` tokens are kept.
        block = min(size, left + 1)
        drafts, logits, hidden = draft_and_verify(
            target, drafter, draft_cache, cache, generated[-1], start, block
        )
        accepted, next_token = verifier.verify(drafts, logits[0])
        committed = [*drafts[:accepted], next_token][:left]
        if hooks.crop_rejected:
            cache.crop(start + accepted + 1)  # anchor + accepted drafts; the bonus is not in yet
        rows = hooks.context_rows(accepted, block)
        commit_context(target, drafter, draft_cache, hidden, rows, start, hooks.feature_offset)

        step_margins = top2_margin(logits[0, : accepted + 1])
        for index, token in enumerate(committed):
            is_bonus = index == accepted
            generated.append(token)
            margins.append(step_margins[index])
            if hooks.emits(token, is_bonus):
                output.append(token)
            if hooks.stops(token, is_bonus, stop_ids):
                stopped = True
                break
        steps.append(StepRecord(accepted, tuple(committed[: index + 1]), 1, block))
    return Generation(output, steps, margins, stop_reason="stop" if stopped else at_end)
