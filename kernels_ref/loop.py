"""Greedy DFlash draft-verify decoding; autoregressive decoding is the same loop with block size 1.

prefill -> [draft a block, verify it with one target forward, accept the longest matching prefix
plus the target's bonus token, crop the caches] until the budget or a stop token. `inject` plants
one known engine bug in the speculative path so the diff test can prove it catches it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from kernels_ref.drafter import DrafterCache, DrafterConfig, StaticDrafterCache
from kernels_ref.faults import FAULTS
from kernels_ref.model import KVCache, StaticKVCache, Target

if TYPE_CHECKING:
    from kernels_ref.sampling import SamplingParams



DraftCache = DrafterCache | StaticDrafterCache  # an oracle may keep its own kind


class DraftModel(Protocol):
    """What the loop needs from a drafter (the real one, or an oracle in tests).

    With `static_cache`, the loop calls `new_cache(True, max_len)` for a preallocated cache.
    """

    config: DrafterConfig

    def new_cache(self) -> DrafterCache: ...

    def extend_context(self, cache: DraftCache, features: Tensor, positions: Tensor) -> None: ...

    def propose(
        self, cache: DraftCache, target: Target, anchor: int, start: int, n: int
    ) -> list[int]: ...


@dataclass(frozen=True)
class StepRecord:
    """One draft-verify step: drafts accepted, tokens committed, target forwards run."""

    accepted: int
    committed: tuple[int, ...]
    target_forwards: int
    block_size: int


@dataclass(frozen=True)
class Generation:
    """What one greedy decode produced.

    `tokens` is the output stream; `margins[i]` is the target's top-2 logit margin where it chose
    the i-th generated token (what tells a numerical near-tie from a logic bug).
    """

    tokens: list[int]
    steps: list[StepRecord]
    margins: list[float]
    prefill_forwards: int = 1
    stop_reason: str = "length"

    @property
    def target_forwards(self) -> int:
        return self.prefill_forwards + sum(step.target_forwards for step in self.steps)

    @property
    def tau(self) -> float:
        """Mean acceptance length (accepted drafts + bonus per step); 0.0 with no steps."""
        if not self.steps:
            return 0.0
        return sum(step.accepted + 1 for step in self.steps) / len(self.steps)


def top2_margin(logits: Tensor) -> list[float]:
    """Per row of `logits` `[T, vocab]`, the gap between the two largest logits."""
    top = logits.float().topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def accepted_prefix(drafts: list[int], choices: list[int], inject: str | None) -> int:
    """How many drafts the step accepts: the longest prefix agreeing with the target's choices."""
    matches = [d == c for d, c in zip(drafts, choices, strict=False)]
    if inject == "no-cumprod":
        return sum(matches)
    accepted = next((i for i, ok in enumerate(matches) if not ok), len(matches))
    if inject == "accept-off-by-one":
        return min(accepted + 1, len(drafts))
    return accepted


def features_at(hidden: list[Tensor], layer_ids: Iterable[int], inject: str | None) -> Tensor:
    """Concatenated outputs of the target layers `layer_ids` (HF `hidden_states[L+1]`)."""
    offset = 0 if inject == "hidden-offset" else 1
    return torch.cat([hidden[layer + offset] for layer in layer_ids], dim=-1)


def commit_context(
    drafter: DraftModel | None,
    draft_cache: DraftCache | None,
    hidden: list[Tensor],
    rows: int,
    start: int,
    inject: str | None,
) -> None:
    """Hand the drafter the context features of `rows` committed positions from `start`."""
    if drafter is None or draft_cache is None:
        return
    features = features_at(hidden, drafter.config.target_layer_ids, inject)[:, :rows]
    positions = torch.arange(start, start + rows, device=features.device)
    drafter.extend_context(draft_cache, features, positions)


def draft_and_verify(
    target: Target,
    drafter: DraftModel | None,
    draft_cache: DraftCache | None,
    cache: KVCache | StaticKVCache,
    anchor: int,
    start: int,
    block: int,
) -> tuple[list[int], Tensor, list[Tensor]]:
    """Draft `block - 1` tokens after `anchor`, then run the target ONCE over [anchor, drafts].

    Returns the drafts, the target's logits `[1, 1 + len(drafts), vocab]` and hidden states.
    """
    device = target.model.embed_tokens.weight.device
    drafts: list[int] = []
    if drafter is not None and draft_cache is not None and block > 1:
        drafts = drafter.propose(draft_cache, target, anchor, start, block - 1)
    ids = torch.tensor([[anchor, *drafts]], device=device)
    positions = torch.arange(start, start + len(drafts) + 1, device=device)
    logits, hidden = target(ids, positions, cache)
    return drafts, logits, hidden


def generate(
    target: Target,
    drafter: DraftModel | None,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    stop_ids: set[int] | frozenset[int],
    static_cache: bool = False,  # preallocated caches (StaticKVCache), the CUDA-graph layout
    block_size: int | None = None,
    inject: str | None = None,
    sampling: SamplingParams | None = None,
    seed: int = 0,
) -> Generation:
    """Greedy decode `prompt_ids`; speculative with `drafter`, autoregressive without.

    Stops after `max_new_tokens`, at the first stop token (included in the output) or when the
    target's context (`max_position_embeddings`) is full. `sampling` with a temperature above 0
    samples instead, with exact rejection sampling (`kernels_ref.sampling.generate_sampled`).
    """
    if sampling is not None and not sampling.greedy:
        from kernels_ref.sampling import generate_sampled  # imported here: it imports this module

        return generate_sampled(
            target,
            drafter,
            prompt_ids,
            max_new_tokens=max_new_tokens,
            stop_ids=frozenset(stop_ids),
            params=sampling,
            seed=seed,
            block_size=block_size,
            inject=inject,
        )
    if inject is not None and inject not in FAULTS:
        raise ValueError(f"unknown fault {inject!r}; known: {', '.join(FAULTS)}")
    if static_cache and inject == "stale-kv":
        raise ValueError("the stale-kv fault needs the growing cache (it never crops)")
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    size = 1 if drafter is None else (block_size or drafter.config.block_size)
    if size < 1:
        raise ValueError("block_size must be at least 1")
    with torch.inference_mode():
        return _decode(
            target,
            drafter,
            prompt_ids,
            max_new_tokens,
            frozenset(stop_ids),
            size,
            inject if drafter is not None else None,
            static_cache,
        )


def _decode(
    target: Target,
    drafter: DraftModel | None,
    prompt: list[int],
    max_new_tokens: int,
    stop_ids: frozenset[int],
    size: int,
    inject: str | None,
    static_cache: bool = False,
) -> Generation:
    device = target.model.embed_tokens.weight.device
    budget = min(max_new_tokens, target.config.max_position_embeddings - len(prompt))
    if budget <= 0:
        return Generation([], [], [], prefill_forwards=0, stop_reason="length")
    capacity = len(prompt) + budget  # the positions a static cache must hold
    cache = target.new_cache(static_cache, capacity)
    draft_cache = None
    if drafter is not None:  # a drafter without static caches takes no arguments
        draft_cache = drafter.new_cache(True, capacity) if static_cache else drafter.new_cache()

    # Prefill: the first new token is the target's own argmax, not counted in acceptance.
    positions = torch.arange(len(prompt), device=device)
    logits, hidden = target(torch.tensor([prompt], device=device), positions, cache)
    commit_context(drafter, draft_cache, hidden, len(prompt), 0, inject)
    generated = [int(logits[0, -1].argmax())]  # the engine's committed tokens
    margins = top2_margin(logits[0, -1:])
    output = list(generated)  # what the engine emits
    steps: list[StepRecord] = []
    stop_reason = "stop" if generated[0] in stop_ids else "length"
    mask_id = drafter.config.mask_token_id if drafter is not None else None
    if inject == "drop-mask-id" and generated[0] == mask_id:
        output.pop()

    while stop_reason == "length" and len(generated) < budget:
        start = len(prompt) + len(generated) - 1  # position of the anchor
        block = min(size, budget - len(generated))
        drafts, logits, hidden = draft_and_verify(
            target, drafter, draft_cache, cache, generated[-1], start, block
        )
        choices = logits[0].argmax(-1).tolist()  # choices[i]: the target's token at start+i+1
        accepted = accepted_prefix(drafts, choices, inject)
        committed = [*drafts[:accepted], choices[accepted]]
        if inject != "stale-kv":
            cache.crop(start + accepted + 1)  # anchor + accepted drafts; the bonus is not in yet
        rows = block if inject == "seq-inflation" else accepted + 1
        commit_context(drafter, draft_cache, hidden, rows, start, inject)

        step_margins = top2_margin(logits[0, : accepted + 1])
        for index, token in enumerate(committed):
            generated.append(token)
            margins.append(step_margins[index])
            is_bonus = index == len(committed) - 1
            if not (inject == "skip-bonus" and is_bonus) and not (
                inject == "drop-mask-id" and token == mask_id
            ):
                output.append(token)
            if token in stop_ids and (is_bonus or inject != "missed-stop"):
                stop_reason = "stop"
                break
        steps.append(StepRecord(accepted, tuple(committed[: index + 1]), 1, block))
    return Generation(output, steps, margins, stop_reason=stop_reason)
