"""The DFlash draft-verify loop, greedy or sampled; autoregressive decoding is block size 1.

prefill -> [draft a block, verify it with one target forward, commit the accepted drafts plus the
verifier's next token, crop the caches] until the budget, a stop token or the end of the
context. Both models keep preallocated `KVCache`s sized for the prompt and the budget.

The verifier decides what a step accepts: `GreedyVerifier` (the longest prefix agreeing with the
target's argmax) or `kernels_ref.sampling.RejectionSampler` (exact speculative rejection
sampling). `Hooks` are the loop's other engine decisions, each as a correct engine makes it;
`kernels_ref.plant` plants a fault by handing `decode` a different part, so this file names none.
`kernels_ref.generate.generate` picks the parts and runs `decode`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from kernels_ref.drafter import DrafterConfig
from kernels_ref.model import KVCache, Target

AcceptRule = Callable[[list[int], list[int]], int]  # (drafts, target's choices) -> accepted


class DraftModel(Protocol):
    """What the loop needs from a drafter (the real one, a CUDA-graph runner, an oracle).

    The loop only hands the drafter's cache back to it (a `KVCache` for the real one).
    """

    config: DrafterConfig

    def new_cache(self, max_len: int | None = None) -> Any: ...

    def extend_context(self, cache: Any, features: Tensor, positions: Tensor) -> None: ...

    def propose(self, cache: Any, target: Target, anchor: int, start: int, n: int) -> list[int]: ...


class Verifier(Protocol):
    """Turns the target's logits into committed tokens."""

    def first(self, logits: Tensor) -> int:
        """The first new token, from the logits `[vocab]` at the prompt's last position."""
        ...

    def verify(self, drafts: list[int], logits: Tensor) -> tuple[int, int]:
        """(drafts accepted, the token after them) from the logits `[1 + len(drafts), vocab]`
        of the target's forward over [anchor, drafts]."""
        ...


@dataclass(frozen=True)
class StepRecord:
    """One draft-verify step: drafts accepted, tokens committed, target forwards run.

    `committed` ends at a stop token and holds at most the budget left, so it can be shorter
    than `accepted + 1`; `block_size` is the positions verified (anchor + drafts).
    """

    accepted: int
    committed: tuple[int, ...]
    target_forwards: int
    block_size: int

    @property
    def length(self) -> int:
        """The step's acceptance length as z-lab's `dflash_generate` counts it: the tokens it
        commits (accepted drafts + bonus, cut at a stop token and at the budget)."""
        return len(self.committed)


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
    stop_reason: str = "length"  # "length" (budget), "stop" (a stop token), "context" (full)

    @property
    def acceptance(self) -> list[int]:
        """Per-step acceptance lengths (`StepRecord.length`), upstream's `acceptance_lengths`."""
        return [step.length for step in self.steps]

    @property
    def target_forwards(self) -> int:
        return self.prefill_forwards + sum(step.target_forwards for step in self.steps)

    @property
    def tau(self) -> float:
        """Mean acceptance length (tokens committed per step); 0.0 with no steps."""
        if not self.steps:
            return 0.0
        return sum(self.acceptance) / len(self.steps)


def top2_margin(logits: Tensor) -> list[float]:
    """Per row of `logits` `[T, vocab]`, the gap between the two largest logits."""
    top = logits.float().topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def features_at(
    hidden: list[Tensor],
    layer_ids: Iterable[int],
    offset: int = 1,
    final_norm: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """Concatenated outputs of the target layers `layer_ids` (HF `hidden_states[L + offset]`;
    `hidden[L + 1]` is layer L's output).

    The last entry goes through `final_norm` when given: in transformers the last element of
    `hidden_states` is the output *after* the model's final RMSNorm, and that is what z-lab's
    `extract_context_feature` hands a drafter whose `target_layer_ids` holds the last layer (and
    what such a drafter was trained on). `hidden` keeps every layer's pre-norm output.
    """
    last = len(hidden) - 1
    indices = [layer + offset for layer in layer_ids]
    chosen = [
        final_norm(hidden[i]) if final_norm is not None and i == last else hidden[i]
        for i in indices
    ]
    return torch.cat(chosen, dim=-1)


def longest_prefix(drafts: list[int], choices: list[int]) -> int:
    """How many drafts a step accepts: the longest prefix agreeing with the target's choices."""
    matches = [d == c for d, c in zip(drafts, choices, strict=False)]
    return next((i for i, ok in enumerate(matches) if not ok), len(matches))


class GreedyVerifier:
    """Greedy verification: accept drafts while they equal the target's argmax."""

    def __init__(self, accept: AcceptRule = longest_prefix) -> None:
        self.accept = accept

    def first(self, logits: Tensor) -> int:
        return int(logits.argmax())

    def verify(self, drafts: list[int], logits: Tensor) -> tuple[int, int]:
        choices = logits.argmax(-1).tolist()  # choices[i]: the target's token after drafts[:i]
        accepted = self.accept(drafts, choices)
        return accepted, choices[accepted]


class Hooks:
    """The loop's engine decisions besides verification, as a correct engine makes them.

    `kernels_ref.plant` subclasses it to change one decision (a planted fault).
    """

    feature_offset = 1  # context features are hidden_states[L + 1], layer L's output

    def room(self, prompt: int, budget: int, block: int) -> int:
        """Positions each cache holds: the prompt and the budget (a block's drafts are
        verified at positions the budget covers)."""
        return prompt + budget

    def crop(self, cache: KVCache, length: int) -> None:
        """Rejected drafts leave the target's cache."""
        cache.crop(length)

    def context_rows(self, accepted: int, block: int) -> int:
        """Positions of a step the drafter's context takes: anchor + accepted drafts."""
        return accepted + 1

    def emits(self, token: int, is_bonus: bool) -> bool:
        """Whether a committed token reaches the output: every one does."""
        return True

    def stops(self, token: int, is_bonus: bool, stop_ids: frozenset[int]) -> bool:
        """Whether a committed token ends decoding: any stop token, drafted or bonus."""
        return token in stop_ids


def decode(
    target: Target,
    drafter: DraftModel | None,
    prompt: list[int],
    *,
    max_new_tokens: int,
    stop_ids: frozenset[int],
    block_size: int,
    verifier: Verifier,
    hooks: Hooks,
) -> Generation:
    """Decode `prompt` (see `kernels_ref.generate.generate`, which checks the arguments)."""
    device = target.model.embed_tokens.weight.device
    room = target.config.max_position_embeddings - len(prompt)
    budget = min(max_new_tokens, room)
    at_end = "context" if room < max_new_tokens else "length"  # why decoding ends without a stop
    if budget <= 0:
        return Generation([], [], [], prefill_forwards=0, stop_reason=at_end)
    capacity = hooks.room(len(prompt), budget, block_size)
    cache = target.new_cache(capacity)
    draft_cache = drafter.new_cache(capacity) if drafter is not None else None

    def commit_context(hidden: list[Tensor], rows: int, start: int) -> None:
        """Hand the drafter the context features of `rows` committed positions from `start`."""
        if drafter is None:
            return
        layer_ids = drafter.config.target_layer_ids
        features = features_at(hidden, layer_ids, hooks.feature_offset, target.model.norm)
        positions = torch.arange(start, start + rows, device=device)
        drafter.extend_context(draft_cache, features[:, :rows], positions)

    # Prefill: the first new token is the verifier's own choice, not counted in acceptance.
    logits, hidden = target(
        torch.tensor([prompt], device=device), torch.arange(len(prompt), device=device), cache
    )
    commit_context(hidden, len(prompt), 0)
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
        block = min(block_size, left + 1)
        drafts: list[int] = []
        if drafter is not None and block > 1:
            drafts = drafter.propose(draft_cache, target, generated[-1], start, block - 1)
        # Verify: ONE target forward over [anchor, drafts].
        ids = torch.tensor([[generated[-1], *drafts]], device=device)
        positions = torch.arange(start, start + len(drafts) + 1, device=device)
        logits, hidden = target(ids, positions, cache)
        accepted, next_token = verifier.verify(drafts, logits[0])
        committed = [*drafts[:accepted], next_token][:left]
        hooks.crop(cache, start + accepted + 1)  # anchor + accepted drafts; the bonus is not in
        commit_context(hidden, hooks.context_rows(accepted, block), start)

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
