"""z-lab's reference (`dflash` 0.1.0 on transformers' Qwen3, fp32 CPU), the peer kernels_ref is
held against, and a recorder of what each side drafted.

`dflash` is installed with `--no-deps` (see the Makefile); its timer assumes CUDA, so callers
replace `dflash.model._cuda_time` with `time.perf_counter` (the peer test's monkeypatch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from dflash import model as zlab
from transformers import Qwen3ForCausalLM
from transformers.utils import logging as hf_logging

from kernels_ref.loop import DraftModel
from kernels_ref.model import KVCache, Target


@dataclass(frozen=True)
class UpstreamRun:
    """What one `dflash_generate` call produced: new tokens, acceptance lengths, drafts."""

    tokens: list[int]
    acceptance: list[int]
    drafts: list[list[int]]


def load_upstream(target_dir: Path, drafter_dir: Path) -> tuple[Any, Any]:
    """The pair as transformers' `Qwen3ForCausalLM` and z-lab's `DFlashDraftModel` (or
    `DFlash2DraftModel`, by `architectures`) (fp32); a missing or unexpected weight fails
    the load."""
    hf_logging.disable_progress_bar()
    target = Qwen3ForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    v2 = "DFlash2DraftModel" in json.loads((drafter_dir / "config.json").read_text())[
        "architectures"
    ]
    model_class = zlab.DFlash2DraftModel if v2 else zlab.DFlashDraftModel
    drafter, info = model_class.from_pretrained(
        drafter_dir, dtype=torch.float32, output_loading_info=True
    )
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise AssertionError(f"z-lab's drafter does not load cleanly: {problems}")
    return target, drafter.eval()


def upstream_generate(
    target: Any,
    drafter: Any,
    prompt: list[int],
    *,
    max_new_tokens: int,
    stop_ids: list[int],
    block_size: int,
) -> UpstreamRun:
    """Greedy `dflash_generate` (block size 1: autoregressive), recording each step's drafts
    (a DFlash 2 drafter's are its selector's path, not the logits' argmax)."""
    drafts: list[list[int]] = []
    if isinstance(drafter, zlab.DFlash2DraftModel):
        propose = drafter.propose

        def recording(*args: Any) -> Any:
            tokens, *rest = propose(*args)
            drafts.append(tokens[0].tolist())
            return (tokens, *rest)

        drafter.propose = recording
    else:
        compute_logits = drafter.compute_logits

        def recording(hidden: torch.Tensor, head: Any) -> torch.Tensor:
            logits = compute_logits(hidden, head)
            drafts.append(logits.argmax(-1)[0].tolist())
            return logits

        drafter.compute_logits = recording
    try:
        out = zlab.dflash_generate(
            drafter,
            target,
            torch.tensor([prompt]),
            max_new_tokens,
            stop_ids,
            block_size=block_size,
            return_stats=True,
        )
    finally:
        drafter.__dict__.pop("propose", None)
        drafter.__dict__.pop("compute_logits", None)
    return UpstreamRun(out.output_ids[0, len(prompt) :].tolist(), out.acceptance_lengths, drafts)


class RecordingDrafter:
    """A kernels_ref drafter that records what it proposes (a `DraftModel` for `generate`)."""

    def __init__(self, drafter: DraftModel) -> None:
        self.drafter = drafter
        self.config = drafter.config
        self.drafts: list[list[int]] = []

    def new_cache(self, max_len: int | None = None) -> KVCache:
        return self.drafter.new_cache(max_len)

    def extend_context(
        self, cache: KVCache, features: torch.Tensor, positions: Any
    ) -> None:
        self.drafter.extend_context(cache, features, positions)

    def propose(
        self,
        cache: KVCache,
        target: Target,
        anchor: int,
        start: int,
        n: int,
    ) -> list[int]:
        drafts = self.drafter.propose(cache, target, anchor, start, n)
        self.drafts.append(list(drafts))
        return drafts
