"""`generate`: decode one prompt with the reference runner, the public entry to the loop.

Checks the arguments, picks the verifier (greedy, or exact rejection sampling above temperature
0), plants a requested fault through `kernels_ref.plant` and runs `kernels_ref.loop.decode`.
"""

from __future__ import annotations

import torch

from kernels_ref.faults import Fault
from kernels_ref.loop import DraftModel, Generation, GreedyVerifier, Verifier, decode
from kernels_ref.model import Target
from kernels_ref.plant import Plant, plant
from kernels_ref.sampling import RejectionSampler, SamplingParams, seeded


def generate(
    target: Target,
    drafter: DraftModel | None,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    stop_ids: set[int] | frozenset[int],
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
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    size = 1 if drafter is None else (block_size or drafter.config.block_size)
    if size < 1:
        raise ValueError("block_size must be at least 1")
    greedy = sampling is None or sampling.greedy
    parts = Plant() if drafter is None else plant(inject, greedy=greedy, drafter=drafter)
    verifier: Verifier
    if sampling is None or sampling.greedy:
        verifier = GreedyVerifier(parts.accept)
    else:
        verifier = RejectionSampler(sampling, seeded(seed), parts.sampler)
    with parts.planted(), torch.inference_mode():
        return decode(
            target,
            drafter,
            prompt_ids,
            max_new_tokens=max_new_tokens,
            stop_ids=frozenset(stop_ids),
            block_size=size,
            verifier=verifier,
            hooks=parts.hooks,
        )
