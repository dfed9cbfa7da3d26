"""The oracle drafter proposes the target's own future: every block accepted, output unchanged."""

from __future__ import annotations

from kernels_ref.fixtures import EOS_ID
from kernels_ref.generate import generate
from kernels_ref.oracle import OracleDrafter


def test_oracle_proposes_the_future_and_every_block_is_accepted(cpu_fixture_models) -> None:
    target, _ = cpu_fixture_models
    prompt = list(b"def mean(data):\n    ")
    args = {"max_new_tokens": 41, "stop_ids": set()}
    ar = generate(target, None, prompt, **args)
    oracle = OracleDrafter.for_prompt(target, prompt, block_size=8, **args)
    assert oracle.propose(oracle.new_cache(), target, 0, len(prompt) - 1, 3) == ar.tokens[:3]
    spec = generate(target, oracle, prompt, block_size=8, **args)
    assert spec.tokens == ar.tokens
    assert [s.accepted + 1 for s in spec.steps] == [8] * 5  # 40 tokens after the prefill's one
    assert spec.tau == 8.0


def test_oracle_pads_past_the_known_continuation(cpu_fixture_models) -> None:
    target, _ = cpu_fixture_models
    oracle = OracleDrafter(target, [5, 6, 7], block_size=4)
    assert oracle.propose(oracle.new_cache(), target, 6, 1, 3) == [7, 0, 0]
    assert oracle.config.mask_token_id == target.config.vocab_size  # never a real token


def test_oracle_stops_where_the_target_stops(cpu_fixture_models) -> None:
    target, _ = cpu_fixture_models
    prompt = list(b"x")
    free = generate(target, None, prompt, max_new_tokens=30, stop_ids=set()).tokens
    stop = free[12]
    args = {"max_new_tokens": 30, "stop_ids": {stop, EOS_ID}}
    ar = generate(target, None, prompt, **args)
    oracle = OracleDrafter.for_prompt(target, prompt, block_size=16, **args)
    spec = generate(target, oracle, prompt, block_size=16, **args)
    assert spec.tokens == ar.tokens and spec.stop_reason == "stop"
