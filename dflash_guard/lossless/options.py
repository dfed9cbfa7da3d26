"""What a local or sampled diff test runs on and how, as frozen objects checked when built.

Torch-free: the CLI builds and checks these before a diff loads torch, and a bad setting is an
`InputError` (exit 2) before any model is read. The endpoint diff's options live with it
(`lossless.endpoint.run.EndpointOptions`); `ReferenceOptions` (an engine against the reference
runner) are here, beside the local diff's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.lossless.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_RUNNER_SAMPLES,
    DEFAULT_RUNNER_TOKENS,
)
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.logprob_check import tolerance_for
from dflash_guard.near_tie import ENGINE, NEAR_TIE_MARGIN
from kernels_ref.faults import Fault


@dataclass(frozen=True)
class LocalOptions:
    """A greedy diff of the reference runner: autoregressive vs speculative, token for token."""

    target: Path  # target model folder (HF layout)
    drafter: Path  # DFlash drafter folder
    prompts: Path | None = None  # JSONL prompt set; None: the shipped set
    max_new_tokens: int | None = None  # caps per-prompt budgets; None: their own or 64
    block_size: int | None = None  # None: the drafter's
    device: str = "cpu"
    dtype: str = "float32"
    inject: Fault | None = None  # a planted engine bug (parsed once: reference.parse_fault)
    cuda_graphs: bool = False  # replay decode/verify/draft steps as CUDA graphs
    threads: int | None = None  # torch CPU threads; None: kernels_ref.threads.choose_threads

    def __post_init__(self) -> None:
        _check_threads(self.threads)
        if self.inject is not None and self.inject.serve_only:
            raise InputError(f"{self.inject} lives between requests in kernels_ref.serve: start "
                             "`python -m kernels_ref.serve --inject` and use `difftest isolation`")
        if self.inject is not None and not self.inject.greedy:
            raise InputError(f"{self.inject} plants a sampler bug: use it with `difftest sampled`")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise InputError("max_new_tokens must be at least 1")
        if self.block_size is not None and self.block_size < 1:
            raise InputError("block size must be at least 1")


@dataclass(frozen=True)
class SampledOptions:
    """A statistical check that sampled speculative decoding draws from the target's law."""

    target: Path
    drafter: Path
    prompts: Path | None = None  # None: three of the shipped prompts
    samples: int = DEFAULT_RUNNER_SAMPLES  # draws per prompt and side
    sample_tokens: int = DEFAULT_RUNNER_TOKENS  # tokens per draw compared jointly
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    alpha: float = DEFAULT_ALPHA  # family-wise false-alarm rate
    seed: int = 0
    inject: Fault | None = None  # a planted sampler bug
    block_size: int | None = None
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = None  # torch CPU threads while decoding; None: the policy's choice

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise InputError("the sampled diff needs --temperature above 0")
        if self.inject is not None and not self.inject.sampling:
            sampler_faults = ", ".join(fault for fault in Fault if fault.sampling)
            raise InputError(f"the sampled diff plants sampler faults only: {sampler_faults}")
        if self.inject is not None and not self.inject.runner:
            raise InputError(f"{self.inject} needs a sampled draft; the runner drafts greedily")
        if self.samples < 1 or self.sample_tokens < 1 or not 0 < self.alpha < 1:
            raise InputError("--samples and --sample-tokens must be positive, --alpha in (0, 1)")
        if self.block_size is not None and self.block_size < 1:
            raise InputError("block size must be at least 1")
        _check_threads(self.threads)


@dataclass(frozen=True)
class ReferenceOptions:
    """An engine against the reference runner: the safetensors target decoded greedily by
    kernels_ref, the engine (any OpenAI-compatible server) sent the same token ids."""

    target: Path  # the safetensors target folder (HF layout)
    candidate: EngineEndpoint  # the engine under test (its metrics URL: acceptance figures)
    gguf: Path | None = None  # the GGUF the engine serves: tokenizer check, record subject
    conversion: Path | None = None  # its conversion record (scripts/llamacpp.py); None: beside it
    prompts: Path | None = None  # JSONL prompt set; None: the shipped set
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    concurrency: int = 4
    near_tie_margin: float = NEAR_TIE_MARGIN[ENGINE]  # nats (a logit margin is the same number)
    dtype: str = "float32"
    threads: int | None = None  # torch CPU threads of the reference decode; None: the policy's
    precision: str | None = None  # what the engine serves; None: the GGUF's, else float32
    max_logprob_delta: float | None = None  # nats; None: the tolerance measured for `precision`
    max_logprob_delta_from: str = "--max-logprob-delta"  # where that tolerance comes from
    drafter: Path | None = None  # the locked drafter: the engine's acceptance against its own

    def __post_init__(self) -> None:
        _check_threads(self.threads)
        if self.concurrency < 1 or self.max_new_tokens < 1 or self.near_tie_margin < 0:
            raise InputError("concurrency and max-new-tokens must be positive")
        if self.max_logprob_delta is not None and not 0 <= self.max_logprob_delta < math.inf:
            raise InputError("--max-logprob-delta must be a finite number of nats >= 0")
        if self.precision is not None and self.max_logprob_delta is None:
            tolerance_for(self.precision)  # a precision never measured needs its own tolerance
        if self.conversion is not None and self.gguf is None:
            raise InputError("--conversion describes a GGUF: give --gguf too")
        if self.drafter is not None and self.candidate.metrics_url is None:
            raise InputError("--drafter is judged by the engine's acceptance counters: give "
                             "--metrics too")


def _check_threads(threads: int | None) -> None:
    """`--threads N` must be a positive count (None leaves it to the thread policy)."""
    if threads is not None and threads < 1:
        raise InputError("--threads must be at least 1")
