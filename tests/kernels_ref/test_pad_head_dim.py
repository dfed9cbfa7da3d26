"""`fixtures make --head-dim 64`: the built-in pair zero-padded to head_dim 64 computes the same
function (issue 22): every logit within 4e-5 of the head_dim-16 pair's, the same greedy tokens
and the same acceptance, with kernels_ref on both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernels_ref.checkpoint import eos_token_ids
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.pad import padding_problem
from tests.support.fixtures import ModelPair
from tests.support.hostile import one_line_error

MAX_NEW_TOKENS = 32


@pytest.fixture(scope="module")
def pairs(builtin_pair: ModelPair, padded_pair: ModelPair) -> dict[int, ModelPair]:
    """The built-in pair by head_dim: 16 as shipped, 64 zero-padded."""
    return {16: builtin_pair, 64: padded_pair}


def prompts() -> list[list[int]]:
    """Byte-level token ids (the fixture's tokenizer maps byte b to id b), BOS first."""
    texts = [b"def f(x):", b"The quick brown", b"for i in range(", b"total = 0\n",
             b"import numpy as np", b"Once upon a time"]
    return [[256, *text] for text in texts]


def test_configs_differ_only_in_head_dim(pairs) -> None:
    for role in ("target", "drafter"):
        small = json.loads((pairs[16].roots[role] / "config.json").read_text())
        padded = json.loads((pairs[64].roots[role] / "config.json").read_text())
        assert padded.pop("head_dim") == 64 and small.pop("head_dim") == 16
        assert padded == small


def test_every_logit_within_4e5(pairs) -> None:
    small, padded = load_target(pairs[16].target), load_target(pairs[64].target)
    worst = 0.0
    with torch.inference_mode():
        for ids in prompts():
            batch, positions = torch.tensor([ids]), torch.arange(len(ids))
            a, _ = small(batch, positions, small.new_cache())
            b, _ = padded(batch, positions, padded.new_cache())
            assert a.abs().max() > 1.0  # real logits, not zeros on both sides
            worst = max(worst, float((a - b).abs().max()))
    assert worst < 4e-5


def test_greedy_tokens_and_acceptance_equal(pairs) -> None:
    runs = {}
    for dim, pair in pairs.items():
        target = load_target(pair.target)
        drafter = load_drafter(pair.drafter, target)
        stops = eos_token_ids(pair.target)
        runs[dim] = [generate(target, drafter, ids, max_new_tokens=MAX_NEW_TOKENS, stop_ids=stops)
                     for ids in prompts()]
    for small, padded in zip(runs[16], runs[64], strict=True):
        assert padded.tokens == small.tokens
        assert padded.acceptance == small.acceptance
    assert sum(sum(g.acceptance) for g in runs[64]) > len(runs[64])  # drafts were accepted


def test_padding_is_exact_in_bf16(pairs) -> None:
    from safetensors.torch import load_file

    small = load_file(pairs[16].target / "model.safetensors")
    padded = load_file(pairs[64].target / "model.safetensors")
    name = "model.layers.0.self_attn."
    assert padded[name + "q_proj.weight"].shape == (4 * 64, 64)
    assert torch.equal(padded[name + "q_proj.weight"][0], small[name + "q_proj.weight"][0] * 2)
    assert torch.equal(padded[name + "v_proj.weight"][32], small[name + "v_proj.weight"][8])
    assert torch.equal(padded[name + "k_norm.weight"][0] * 2, small[name + "k_norm.weight"][0])
    assert padded[name + "q_proj.weight"][1].abs().sum() == 0  # a new, zero dim


@pytest.mark.parametrize("head_dim", [8, 16, 32, 48, 128])
def test_head_dims_that_cannot_be_exact_are_refused(cli, tmp_path: Path, head_dim: int) -> None:
    assert padding_problem(16, head_dim) is not None
    message = one_line_error(cli("fixtures", "make", tmp_path / "p", "--head-dim", str(head_dim)))
    assert "--head-dim" in message
    assert not (tmp_path / "p").exists()
