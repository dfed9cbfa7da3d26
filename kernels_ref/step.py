"""The draft-verify step every decoding mode shares: drafter interface, records, step moves."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from kernels_ref.drafter import DrafterCache, DrafterConfig, StaticDrafterCache
from kernels_ref.model import KVCache, StaticKVCache, Target

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
    """What one decode produced.

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


def features_at(hidden: list[Tensor], layer_ids: Iterable[int], offset: int = 1) -> Tensor:
    """Concatenated outputs of the target layers `layer_ids` (HF `hidden_states[L + offset]`;
    `hidden[L + 1]` is layer L's output)."""
    return torch.cat([hidden[layer + offset] for layer in layer_ids], dim=-1)


def commit_context(
    drafter: DraftModel | None,
    draft_cache: DraftCache | None,
    hidden: list[Tensor],
    rows: int,
    start: int,
    feature_offset: int = 1,
) -> None:
    """Hand the drafter the context features of `rows` committed positions from `start`."""
    if drafter is None or draft_cache is None:
        return
    features = features_at(hidden, drafter.config.target_layer_ids, feature_offset)[:, :rows]
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
