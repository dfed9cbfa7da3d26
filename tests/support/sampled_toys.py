"""A tiny target/drafter pair for the sampled-exactness tests: an order-2 Markov target and a
block drafter that sees only the anchor token. Cache-free, vectorised over draws."""

from __future__ import annotations

import torch


class MarkovPair:
    """Target: logits of the next token from the last two tokens. Drafter: for each of the
    `block_size - 1` positions after the anchor, logits from the anchor alone."""

    def __init__(self, vocab: int = 6, block_size: int = 4, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.block_size = block_size
        self.table = 1.5 * torch.randn(vocab, vocab, vocab, generator=g, dtype=torch.float64)
        # The drafter guesses the target's next-token logits, blurred, at every block position.
        guess = self.table.mean(0)  # [anchor, V]: the target averaged over the older token
        noise = torch.randn(vocab, block_size - 1, vocab, generator=g, dtype=torch.float64)
        self.draft_table = guess.unsqueeze(1) + 0.4 * noise  # [anchor, K, V]

    def target_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        older = torch.cat([torch.zeros_like(tokens[:, :1]), tokens[:, :-1]], dim=1)
        return self.table[older, tokens]

    def draft_logits(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        anchor = tokens[torch.arange(len(tokens)), lengths - 1]
        return self.draft_table[anchor]
