"""An oracle drafter: proposes the target's own future greedy tokens, read from a prior AR run.

Every draft it makes is what the target would choose, so each block is accepted whole (up to the
budget): an upper bound on speculative throughput that costs no draft compute, which isolates the
cost of verification. A benchmark tool only: it knows the future, so never diff-test with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from kernels_ref.drafter import DrafterConfig
from kernels_ref.generate import generate
from kernels_ref.model import Target


@dataclass
class OracleCache:
    """How many context tokens the loop has committed (kept for the loop's bookkeeping)."""

    length: int = 0


class OracleDrafter:
    """Proposes `sequence[start + 1 : start + 1 + n]`: the target's own greedy continuation."""

    def __init__(self, target: Target, sequence: Sequence[int], block_size: int) -> None:
        """`sequence` is the prompt followed by the target's greedy output for it."""
        layers = target.config
        self.sequence = list(sequence)
        self.config = DrafterConfig(
            layers=layers,
            block_size=block_size,
            num_target_layers=layers.num_hidden_layers,
            mask_token_id=layers.vocab_size,  # outside the vocabulary: never a real token
            target_layer_ids=(layers.num_hidden_layers - 1,),
        )

    @classmethod
    def for_prompt(
        cls,
        target: Target,
        prompt_ids: list[int],
        *,
        max_new_tokens: int,
        stop_ids: set[int] | frozenset[int],
        block_size: int,
    ) -> OracleDrafter:
        """Run the target autoregressively on `prompt_ids` and keep its continuation."""
        ar = generate(
            target,
            None,
            prompt_ids,
            max_new_tokens=max_new_tokens,
            stop_ids=stop_ids,
        )
        return cls(target, [*prompt_ids, *ar.tokens], block_size)

    def new_cache(self, max_len: int | None = None) -> OracleCache:
        return OracleCache()

    def extend_context(self, cache: OracleCache, features: Tensor, positions: Tensor) -> None:
        cache.length += features.shape[1]

    def propose(
        self, cache: OracleCache, target: Target, anchor: int, start: int, n: int
    ) -> list[int]:
        """The target's tokens at positions `start + 1 .. start + n` (anchor at `start`); past
        the known continuation, token 0 (verified like any draft)."""
        future = self.sequence[start + 1 : start + 1 + n]
        return future + [0] * (n - len(future))
