"""CUDA-graph capture of the decode, verify and draft steps, with an eager fallback off CUDA.

A step is a function over static buffers: the token ids and positions go in by `copy_`, the
target writes its keys/values into its `KVCache` at the cache's device-side length, and the
logits, hidden states (or draft tokens) come out in the tensors the capture allocated. Replaying
one graph launches the whole step at once; nothing inside it reads back to the host. The loop's
only host reads are its own (the verify argmax that decides the accepted count, and the drafted
tokens it hands back to the target).

    runner = GraphRunner(target, drafter, max_len=1024, block_sizes=(16,))
    out = generate(runner.target, runner.drafter, prompt, max_new_tokens=256, stop_ids=eos)

`runner.target` and `runner.drafter` stand in for the models in `kernels_ref.loop.generate`:
token counts with a captured graph (1 for decode, each block size for verify and draft, 1 up to
the largest block for the drafter's context update) replay it; others (the prefill, a block cut
short by the budget) run eagerly on the same caches. Off CUDA every "graph" runs its
function eagerly over the same buffers, so the plumbing is tested on CPU. References: PyTorch's
CUDA Graphs notes (torch.cuda.graph, warm-up on a side stream), gpt-fast's static KV cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import torch
from torch import Tensor

from kernels_ref.drafter import Drafter
from kernels_ref.model import KVCache, Target

ALIGN = 16  # static buffers are padded to this many positions (aligned attention masks)


def cuda_graphs_available(device: torch.device) -> bool:
    """Whether steps on `device` can be captured (a CUDA device and a CUDA build of torch)."""
    return device.type == "cuda" and torch.cuda.is_available()


def static_len(longest_prompt: int, max_new_tokens: int, max_positions: int) -> int:
    """Positions a cache needs for prompts up to `longest_prompt` tokens and a budget of
    `max_new_tokens`: never more than the model's context, padded up to a multiple of `ALIGN`."""
    if longest_prompt < 1 or max_new_tokens < 1:
        raise ValueError("the prompt and the budget must each be at least one token")
    needed = min(longest_prompt + max_new_tokens, max_positions)
    return -(-needed // ALIGN) * ALIGN


def step_sizes(block_sizes: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Token counts to capture: the target's (1 = decode, each block size = verify) and the
    drafter's (each block size above 1: anchor plus masks)."""
    blocks = sorted(set(block_sizes))
    if not blocks or blocks[0] < 1:
        raise ValueError("block sizes must be positive")
    return tuple(sorted({1, *blocks})), tuple(b for b in blocks if b > 1)


class StepGraph:
    """`step()` captured as a CUDA graph (`capture`), or simply called (no CUDA)."""

    def __init__(
        self, step: Callable[[], Any], *, capture: bool, reset: Callable[[], None] | None = None
    ) -> None:
        """`reset` undoes the step's side effects (cache writes) after warm-up and capture."""
        self.step = step
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: Any = None
        if capture:
            side = torch.cuda.Stream()  # warm up off the default stream, as capture requires
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream().wait_stream(side)
            if reset is not None:
                reset()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.outputs = step()
            if reset is not None:
                reset()

    def __call__(self) -> Any:
        """Run the step: replay the graph (its outputs are the same tensors every time)."""
        if self.graph is None:
            return self.step()
        self.graph.replay()
        return self.outputs


class GraphTarget:
    """The target over one cache; stands in for `Target` in `generate`."""

    def __init__(self, target: Target, max_len: int, sizes: Iterable[int], capture: bool) -> None:
        self.target = target
        self.config = target.config
        self.model = target.model
        self.head = target.head
        self.cache = cache = target.new_cache(max_len)
        device = target.model.embed_tokens.weight.device
        self.ids: dict[int, Tensor] = {}
        self.positions: dict[int, Tensor] = {}
        self.graphs: dict[int, StepGraph] = {}
        for t in sizes:
            ids = self.ids[t] = torch.zeros(1, t, dtype=torch.long, device=device)
            positions = self.positions[t] = torch.arange(t, device=device)
            self.graphs[t] = StepGraph(
                partial(target, ids, positions, cache), capture=capture, reset=lambda: cache.crop(0)
            )

    @torch.inference_mode()
    def new_cache(self, max_len: int | None = None) -> KVCache:
        """The runner's one cache, emptied."""
        if max_len is not None and max_len > self.cache.max_len:
            raise ValueError(
                f"this runner's cache holds {self.cache.max_len} positions; {max_len} are needed"
            )
        self.cache.crop(0)
        return self.cache

    @torch.inference_mode()
    def __call__(
        self, ids: Tensor, positions: Tensor, cache: KVCache
    ) -> tuple[Tensor, list[Tensor]]:
        """`Target.forward`: replays the graph captured for `ids`' length, else runs eagerly.

        A replay returns the graph's own output tensors: read them before the next step.
        """
        if cache is not self.cache:
            raise ValueError("a GraphTarget only runs on its own cache (from new_cache())")
        t = ids.shape[1]
        if t not in self.graphs:
            return self.target(ids, positions, cache)
        self.ids[t].copy_(ids)
        self.positions[t].copy_(positions)
        return self.graphs[t]()


class GraphDrafter:
    """The drafter over one context cache; stands in for `Drafter` in `generate`."""

    def __init__(
        self,
        drafter: Drafter,
        target: Target,
        max_len: int,
        sizes: Iterable[int],
        capture: bool,
    ) -> None:
        self.drafter, self.target = drafter, target
        self.config = drafter.config
        self.cache = cache = drafter.new_cache(max_len)
        device = target.model.embed_tokens.weight.device
        self.ids: dict[int, Tensor] = {}
        self.start = torch.zeros((), dtype=torch.long, device=device)  # the anchor's position
        self.graphs: dict[int, StepGraph] = {}
        for t in sizes:
            ids = self.ids[t] = torch.full(
                (1, t), drafter.config.mask_token_id, dtype=torch.long, device=device
            )
            offsets = torch.arange(t, device=device)
            self.graphs[t] = StepGraph(partial(self._draft, ids, offsets), capture=capture)
        # Context updates: one graph per committed count 1..largest block (accepted + bonus).
        width = len(drafter.config.target_layer_ids) * drafter.config.layers.hidden_size
        dtype = drafter.fc.weight.dtype
        self.features: dict[int, Tensor] = {}
        self.positions: dict[int, Tensor] = {}
        self.context_graphs: dict[int, StepGraph] = {}
        for n in range(1, max(sizes, default=1) + 1):
            features = self.features[n] = torch.zeros(1, n, width, dtype=dtype, device=device)
            positions = self.positions[n] = torch.arange(n, device=device)
            self.context_graphs[n] = StepGraph(
                partial(drafter.extend_context, cache, features, positions),
                capture=capture,
                reset=lambda: cache.crop(0),
            )

    def _draft(self, ids: Tensor, offsets: Tensor) -> Tensor:
        """The draft step over the static `ids`, at the anchor's position plus `offsets`."""
        return self.drafter.draft(self.cache, self.target, ids, self.start + offsets)

    @torch.inference_mode()
    def new_cache(self, max_len: int | None = None) -> KVCache:
        """The runner's one context cache, emptied."""
        if max_len is not None and max_len > self.cache.max_len:
            raise ValueError(
                f"this runner's cache holds {self.cache.max_len} positions; {max_len} are needed"
            )
        self.cache.crop(0)
        return self.cache

    @torch.inference_mode()
    def extend_context(self, cache: KVCache, features: Tensor, positions: Tensor) -> None:
        """Append committed context: replays the graph for its row count, else (the prompt)
        runs eagerly."""
        if cache is not self.cache:
            raise ValueError("a GraphDrafter only runs on its own cache (from new_cache())")
        n = features.shape[1]
        if n not in self.context_graphs:
            self.drafter.extend_context(cache, features, positions)
            return
        self.features[n].copy_(features)
        self.positions[n].copy_(positions)
        self.context_graphs[n]()

    @torch.inference_mode()
    def propose(
        self, cache: KVCache, target: Any, anchor: int, start: int, n: int
    ) -> list[int]:
        """`Drafter.propose`: replays the draft graph for `n + 1` tokens, else runs eagerly."""
        if cache is not self.cache:
            raise ValueError("a GraphDrafter only runs on its own cache (from new_cache())")
        graph = self.graphs.get(n + 1)
        if graph is None:
            return self.drafter.propose(cache, self.target, anchor, start, n)
        self.ids[n + 1][0, 0].fill_(anchor)
        self.start.fill_(start)
        return graph().tolist()


class GraphRunner:
    """Caches and captured steps for one target (and optionally one drafter).

    `capture=None` captures when the models sit on a CUDA device and runs eagerly otherwise;
    `capture=True` without CUDA raises `ValueError`.
    """

    def __init__(
        self,
        target: Target,
        drafter: Drafter | None = None,
        *,
        max_len: int,
        block_sizes: Iterable[int] = (16,),
        capture: bool | None = None,
    ) -> None:
        device = target.model.embed_tokens.weight.device
        available = cuda_graphs_available(device)
        if capture and not available:
            raise ValueError(f"CUDA graphs need a CUDA device; the models are on {device}")
        self.captured = available if capture is None else capture
        target_sizes, draft_sizes = step_sizes(block_sizes)
        with torch.inference_mode():
            self.target = GraphTarget(target, max_len, target_sizes, self.captured)
            self.drafter = (
                None
                if drafter is None
                else GraphDrafter(drafter, target, max_len, draft_sizes, self.captured)
            )
