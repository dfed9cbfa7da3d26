"""The draft-verify loop: speculative greedy output equals autoregressive output, exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels_ref.errors import RunnerError
from kernels_ref.faults import Fault
from kernels_ref.fixtures import EOS_ID
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.plant import accepted_prefix
from kernels_ref.sampling import SamplingParams
from tests.support.kernels import random_pair

PROMPTS = [b"def mean(data):\n    ", b"    return self.", b"x", b"abcabcabcabc"]


@pytest.mark.parametrize("block_size", [2, 4, 8, 16])
def test_fixture_pair_speculative_equals_autoregressive(cpu_fixture_models,
                                                        block_size: int) -> None:
    target, drafter = cpu_fixture_models
    for prompt in PROMPTS:
        args = {"max_new_tokens": 40, "stop_ids": {EOS_ID}}
        ar = generate(target, None, list(prompt), **args)
        spec = generate(target, drafter, list(prompt), block_size=block_size, **args)
        assert spec.tokens == ar.tokens, (prompt, block_size)
        assert len(ar.steps) == len(ar.tokens) - 1  # one target forward per token after prefill


def test_fixture_drafter_is_trained(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    runs = [generate(target, drafter, list(p), max_new_tokens=64, stop_ids=set()) for p in PROMPTS]
    steps = [s for run in runs for s in run.steps]
    tau = sum(s.accepted + 1 for s in steps) / len(steps)
    assert tau > 2.0  # a random drafter sits near 1.0 (see the random-pair test)
    assert any(s.accepted + 1 < s.block_size for s in steps)  # and it is not an oracle


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("block_size", [2, 5, 8])
def test_random_pairs_speculative_equals_autoregressive(
    tmp_path: Path, seed: int, block_size: int
) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, seed, block_size=block_size)
    target = load_target(target_dir)
    drafter = load_drafter(drafter_dir, target)
    prompt = torch.randint(0, 256, (7,), generator=torch.Generator().manual_seed(seed)).tolist()
    ar = generate(target, None, prompt, max_new_tokens=24, stop_ids=set())
    spec = generate(target, drafter, prompt, max_new_tokens=24, stop_ids=set())
    assert spec.tokens == ar.tokens
    assert len(spec.tokens) == 24


def test_float64_matches_too(tmp_path: Path) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, 11)
    target = load_target(target_dir, dtype="float64")
    drafter = load_drafter(drafter_dir, target, dtype="float64")
    assert target.model.embed_tokens.weight.dtype == torch.float64
    ar = generate(target, None, [5, 6, 7], max_new_tokens=20, stop_ids=set())
    assert (
        generate(target, drafter, [5, 6, 7], max_new_tokens=20, stop_ids=set()).tokens == ar.tokens
    )


def test_stop_token_inside_a_block_and_budget(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    prompt = list(b"def mean(data):\n    ")
    free = generate(target, None, prompt, max_new_tokens=48, stop_ids=set()).tokens
    stop = free[10]  # a token the greedy continuation reaches mid-way
    ar = generate(target, None, prompt, max_new_tokens=48, stop_ids={stop})
    for block_size in (4, 8, 16):
        spec = generate(
            target, drafter, prompt, max_new_tokens=48, stop_ids={stop}, block_size=block_size
        )
        assert spec.tokens == ar.tokens == free[: free.index(stop) + 1]
        assert spec.stop_reason == "stop"
        budget = generate(
            target, drafter, prompt, max_new_tokens=5, stop_ids=set(), block_size=block_size
        )
        assert budget.tokens == free[:5]


def test_context_limit_and_single_token_prompt(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    limit = target.config.max_position_embeddings
    long_prompt = (list(b"abc ") * limit)[: limit - 3]
    ar = generate(target, None, long_prompt, max_new_tokens=50, stop_ids=set())
    spec = generate(target, drafter, long_prompt, max_new_tokens=50, stop_ids=set())
    assert len(ar.tokens) == 3 and spec.tokens == ar.tokens
    assert ar.stop_reason == spec.stop_reason == "context"  # said, not silently capped
    assert sum(spec.acceptance) == len(spec.tokens) - 1  # the prefill's token is not a step's
    fits = generate(target, drafter, long_prompt, max_new_tokens=3, stop_ids=set())
    assert fits.tokens == ar.tokens and fits.stop_reason == "length"
    one = generate(target, drafter, [ord("d")], max_new_tokens=30, stop_ids=set())
    assert (
        one.tokens == generate(target, None, [ord("d")], max_new_tokens=30, stop_ids=set()).tokens
    )


def test_kv_cache_crop_is_exact(cpu_fixture_models) -> None:
    target, _ = cpu_fixture_models
    ids = torch.tensor([list(b"hello world")])
    cache = target.new_cache()
    target(ids, torch.arange(11), cache)
    cache.crop(5)
    assert len(cache) == 5
    cropped, _ = target(ids[:, 5:6], torch.tensor([5]), cache)
    fresh_cache = target.new_cache()
    target(ids[:, :5], torch.arange(5), fresh_cache)
    fresh, _ = target(ids[:, 5:6], torch.tensor([5]), fresh_cache)
    torch.testing.assert_close(cropped, fresh, rtol=0, atol=1e-5)
    stale_cache = target.new_cache()
    target(ids, torch.arange(11), stale_cache)  # not cropped: the rejected tokens stay visible
    stale, _ = target(ids[:, 5:6], torch.tensor([5]), stale_cache)
    assert not torch.allclose(stale, fresh, atol=1e-3)


def test_accepted_prefix_and_its_planted_bugs() -> None:
    drafts, choices = [1, 2, 9, 4], [1, 2, 3, 4, 5]
    assert accepted_prefix(drafts, choices, None) == 2
    assert accepted_prefix(drafts, choices, Fault.ACCEPT_OFF_BY_ONE) == 3
    assert accepted_prefix(drafts, choices, Fault.NO_CUMPROD) == 3
    assert accepted_prefix([1, 2], [1, 2, 7], Fault.ACCEPT_OFF_BY_ONE) == 2


def test_unknown_fault_is_refused_where_text_enters() -> None:
    assert Fault.parse("stale-kv") is Fault.STALE_KV
    with pytest.raises(RunnerError, match="unknown fault 'nope'; known faults: accept-off-by-one"):
        Fault.parse("nope")


def test_a_fault_of_the_other_decoding_is_refused(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    args = {"max_new_tokens": 2, "stop_ids": set()}
    with pytest.raises(ValueError, match="sampler fault"):
        generate(target, drafter, [1], inject=Fault.RESAMPLE_FROM_P, **args)
    hot = SamplingParams(temperature=1.0)
    with pytest.raises(ValueError, match="greedy-loop fault"):
        generate(target, drafter, [1], inject=Fault.STALE_KV, sampling=hot, **args)
    with pytest.raises(ValueError, match="needs a sampled draft"):
        generate(target, drafter, [1], inject=Fault.REUSE_DRAFT_UNIFORMS, sampling=hot, **args)
