"""The static KV cache decodes exactly as the growing one: same tokens, same acceptance."""

from __future__ import annotations

import pytest
import torch

from kernels_ref.faults import Fault
from kernels_ref.fixtures import EOS_ID
from kernels_ref.loop import generate
from kernels_ref.model import StaticKVCache
from tests.support.cuda import tiny_pair

PROMPTS = [b"def mean(data):\n    ", b"x", b"abcabcabcabc"]


@pytest.mark.parametrize("block_size", [2, 8, 16])
def test_fixture_pair_static_equals_dynamic(cpu_fixture_models, block_size: int) -> None:
    target, drafter = cpu_fixture_models
    args = {"max_new_tokens": 40, "stop_ids": {EOS_ID}}
    for prompt in PROMPTS:
        ar = generate(target, None, list(prompt), **args)
        ar_static = generate(target, None, list(prompt), static_cache=True, **args)
        spec = generate(target, drafter, list(prompt), block_size=block_size, **args)
        spec_static = generate(
            target, drafter, list(prompt), block_size=block_size, static_cache=True, **args
        )
        assert ar_static.tokens == ar.tokens == spec_static.tokens, (prompt, block_size)
        assert [s.accepted for s in spec_static.steps] == [s.accepted for s in spec.steps]
    assert spec_static.tau > 1.5  # the trained drafter is really drafting through the static path


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("block_size", [3, 5])
def test_random_pairs_static_equals_dynamic(seed: int, block_size: int) -> None:
    target, drafter = tiny_pair(seed, block_size)
    prompt = torch.randint(0, 256, (7,), generator=torch.Generator().manual_seed(seed)).tolist()
    args = {"max_new_tokens": 24, "stop_ids": set()}
    ar = generate(target, None, prompt, **args)
    spec_static = generate(target, drafter, prompt, static_cache=True, **args)
    assert generate(target, None, prompt, static_cache=True, **args).tokens == ar.tokens
    assert spec_static.tokens == ar.tokens and len(ar.tokens) == 24


def test_crop_sets_the_length_and_the_tail_is_masked(cpu_fixture_models) -> None:
    target, _ = cpu_fixture_models
    ids = torch.tensor([list(b"hello world")])
    with torch.inference_mode():
        cache = target.new_cache(static=True, max_len=32)
        assert isinstance(cache, StaticKVCache) and len(cache) == 0
        target(ids, torch.arange(11), cache)
        assert len(cache) == 11
        cache.crop(5)
        assert len(cache) == 5
        assert cache.keys[0][:, :, 5:11].abs().sum() > 0  # stale rows stay in the buffer ...
        cropped, _ = target(ids[:, 5:6], torch.tensor([5]), cache)  # ... but are not seen
        assert len(cache) == 6
        fresh_cache = target.new_cache(static=True, max_len=32)
        target(ids[:, :5], torch.arange(5), fresh_cache)
        fresh, _ = target(ids[:, 5:6], torch.tensor([5]), fresh_cache)
        dynamic_cache = target.new_cache()
        target(ids[:, :5], torch.arange(5), dynamic_cache)
        dynamic, _ = target(ids[:, 5:6], torch.tensor([5]), dynamic_cache)
        # Masked stale rows change the CPU attention kernel's reduction order, not the result:
        # equal to float noise here, while the uncropped cache below differs by more than 1e-3.
        torch.testing.assert_close(cropped, fresh, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(cropped, dynamic, rtol=1e-5, atol=1e-5)
        stale_cache = target.new_cache(static=True, max_len=32)
        target(ids, torch.arange(11), stale_cache)  # not cropped: the rejected tokens stay visible
        stale, _ = target(ids[:, 5:6], torch.tensor([5]), stale_cache)
    assert not torch.allclose(stale, fresh, atol=1e-3)


def test_mask_hides_positions_beyond_each_query() -> None:
    cache = StaticKVCache(1, 1, 2, 6, device="cpu", dtype=torch.float32)
    cache.crop(2)
    expected = torch.tensor(
        [[True, True, True, False, False, False], [True, True, True, True, False, False]]
    )
    assert torch.equal(cache.mask(2), expected)


def test_static_drafter_cache_masks_unwritten_context() -> None:
    _, drafter = tiny_pair(3)
    cache = drafter.new_cache(static=True, max_len=8)
    with torch.inference_mode():
        drafter.extend_context(cache, torch.randn(1, 3, 64), torch.arange(3))
    assert int(cache.length) == 3
    mask = cache.mask(2)
    assert mask.shape == (2, 10)
    assert mask[:, :3].all() and not mask[:, 3:8].any() and mask[:, 8:].all()


def test_static_cache_refuses_the_stale_kv_fault(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    with pytest.raises(ValueError, match="stale-kv"):
        generate(
            target,
            drafter,
            [1],
            max_new_tokens=4,
            stop_ids=set(),
            inject=Fault.STALE_KV,
            static_cache=True,
        )


def test_planted_fault_still_diverges_on_the_static_path(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    prompt = list(PROMPTS[0])
    args = {"max_new_tokens": 40, "stop_ids": {EOS_ID}, "static_cache": True}
    ar = generate(target, None, prompt, **args)
    bad = generate(target, drafter, prompt, inject=Fault.ACCEPT_OFF_BY_ONE, **args)
    assert bad.tokens != ar.tokens
