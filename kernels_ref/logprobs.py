"""The target's log-probabilities at every position of a given output (one teacher-forced pass).

What an engine's `logprobs` / `top_logprobs` (llama.cpp's `n_probs`) report for the tokens it
committed, computed by the reference runner for the same context: the prompt, then the output's
tokens fed back. Row `i` is the log-softmax (in float64) after `prompt + tokens[:i]`; one extra row
follows the last token (the distribution where a decode that stopped there would have gone on).
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels_ref.model import Target


@torch.inference_mode()
def output_logprobs(target: Target, prompt: list[int], tokens: list[int]) -> Tensor:
    """`[len(tokens) + 1, vocab]` float64 log-probabilities on the CPU: row `i` after
    `prompt + tokens[:i]` (one forward over `prompt + tokens`)."""
    if not prompt:
        raise ValueError("the prompt is empty")
    device = target.model.embed_tokens.weight.device
    ids = torch.tensor([prompt + tokens], device=device)
    logits, _ = target(ids, torch.arange(ids.shape[1], device=device),
                       target.new_cache(ids.shape[1]))
    return logits[0, len(prompt) - 1 :].double().log_softmax(-1).cpu()


def top_logprobs(row: Tensor, k: int) -> tuple[tuple[int, float], ...]:
    """The `k` best tokens of one row of `output_logprobs`, best first."""
    values, indices = row.topk(min(k, row.shape[-1]))
    return tuple((int(t), float(v)) for t, v in zip(indices.tolist(), values.tolist(),
                                                      strict=True))
