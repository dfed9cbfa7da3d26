"""The one KV cache: preallocated buffers, a device length, a crop that only moves the length."""

from __future__ import annotations

import torch

from kernels_ref.faults import Fault
from kernels_ref.fixtures import EOS_ID
from kernels_ref.generate import generate
from kernels_ref.model import KVCache
from tests.support.cuda import tiny_pair

PROMPTS = [b"def mean(data):\n    ", b"x", b"abcabcabcabc"]


def test_crop_sets_the_length_and_the_tail_is_masked(cpu_fixture_models) -> None:
    target, _ = cpu_fixture_models
    ids = torch.tensor([list(b"hello world")])
    with torch.inference_mode():
        cache = target.new_cache(max_len=32)
        assert isinstance(cache, KVCache) and len(cache) == 0
        target(ids, torch.arange(11), cache)
        assert len(cache) == 11
        cache.crop(5)
        assert len(cache) == 5
        assert cache.keys[0][:, :, 5:11].abs().sum() > 0  # stale rows stay in the buffer ...
        cropped, _ = target(ids[:, 5:6], torch.tensor([5]), cache)  # ... but are not seen
        assert len(cache) == 6
        fresh_cache = target.new_cache(max_len=32)
        target(ids[:, :5], torch.arange(5), fresh_cache)
        fresh, _ = target(ids[:, 5:6], torch.tensor([5]), fresh_cache)
        exact_cache = target.new_cache(max_len=6)  # no tail at all
        target(ids[:, :5], torch.arange(5), exact_cache)
        exact, _ = target(ids[:, 5:6], torch.tensor([5]), exact_cache)
        # Masked stale rows change the CPU attention kernel's reduction order, not the result:
        # equal to float noise here, while the uncropped cache below differs by more than 1e-3.
        torch.testing.assert_close(cropped, fresh, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(cropped, exact, rtol=1e-5, atol=1e-5)
        stale_cache = target.new_cache(max_len=32)
        target(ids, torch.arange(11), stale_cache)  # not cropped: the rejected tokens stay visible
        stale, _ = target(ids[:, 5:6], torch.tensor([5]), stale_cache)
    assert not torch.allclose(stale, fresh, atol=1e-3)


def test_mask_hides_positions_beyond_each_query() -> None:
    cache = KVCache(1, 1, 2, 6, device="cpu", dtype=torch.float32)
    cache.crop(2)
    expected = torch.tensor(
        [[True, True, True, False, False, False], [True, True, True, True, False, False]]
    )
    assert torch.equal(cache.causal_mask(2), expected)


def test_drafter_block_sees_the_context_and_itself_not_the_tail() -> None:
    _, drafter = tiny_pair(3)
    cache = drafter.new_cache(max_len=8)
    with torch.inference_mode():
        drafter.extend_context(cache, torch.randn(1, 3, 64), torch.arange(3))
    assert int(cache.length) == 3
    mask = cache.block_mask(2)
    assert mask.shape == (2, 8)
    assert mask[:, :5].all() and not mask[:, 5:].any()


def test_drafting_leaves_the_context_length_alone(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    cache = drafter.new_cache(max_len=16)
    width = len(drafter.config.target_layer_ids) * target.config.hidden_size
    with torch.inference_mode():
        drafter.extend_context(cache, torch.randn(1, 4, width), torch.arange(4))
        first = drafter.propose(cache, target, 65, 4, 3)
        assert len(cache) == 4  # the block's keys/values were scratch past the length
        assert drafter.propose(cache, target, 65, 4, 3) == first


def test_planted_fault_still_diverges(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    prompt = list(PROMPTS[0])
    args = {"max_new_tokens": 40, "stop_ids": {EOS_ID}}
    ar = generate(target, None, prompt, **args)
    bad = generate(target, drafter, prompt, inject=Fault.ACCEPT_OFF_BY_ONE, **args)
    assert bad.tokens != ar.tokens
