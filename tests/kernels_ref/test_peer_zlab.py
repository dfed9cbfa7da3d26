"""kernels_ref against z-lab's own reference, step for step (the test that keeps it honest).

On the built-in trained pair (the default prompts) and on a random-weight pair whose drafter reads
the target's last layer, fp32 CPU, greedy: autoregressive tokens, speculative tokens, per-step
acceptance lengths and every step's drafts equal `dflash.model.dflash_generate`'s. The one
deliberate difference, the context limit (z-lab decodes past `max_position_embeddings`, engines
and kernels_ref stop there), is held explicit: z-lab gets the budget that fits.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dflash_guard.lossless.defaults import DEFAULT_MAX_NEW_TOKENS
from dflash_guard.lossless.local import difftest_models
from dflash_guard.lossless.prompts import Prompt, load_prompts
from kernels_ref.checkpoint import eos_token_ids
from kernels_ref.load import load_drafter, load_target
from kernels_ref.prompts import DEFAULT_PROMPTS
from kernels_ref.tokenizer import load_tokenizer
from tests.support.kernels import random_pair
from tests.support.zlab import RecordingDrafter, load_upstream, upstream_generate

pytestmark = pytest.mark.usefixtures("cpu_timer")  # z-lab's clock, on the CPU


def assert_peer_equal(target_dir: Path, drafter_dir: Path, prompts: list[Prompt]) -> dict:
    """Run both sides on every prompt; assert they agree; return the closing table's numbers."""
    target = load_target(target_dir)
    drafter = load_drafter(drafter_dir, target)
    up_target, up_drafter = load_upstream(target_dir, drafter_dir)
    eos = eos_token_ids(target_dir)
    block = drafter.config.block_size
    ours_steps, theirs_steps = [], []
    for prompt in prompts:
        budget = prompt.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        recorder = RecordingDrafter(drafter)
        report = difftest_models(
            target, recorder, [prompt], stop_ids=eos, max_new_tokens=DEFAULT_MAX_NEW_TOKENS
        )
        ours = report.to_json()["prompts"][0]
        # The explicit difference: z-lab would decode past the context, so it gets what fits.
        fits = min(budget, target.config.max_position_embeddings - len(prompt.ids))
        stops = sorted(eos | prompt.stop_ids)
        args = {"max_new_tokens": fits, "stop_ids": stops}
        ar = upstream_generate(up_target, up_drafter, list(prompt.ids), block_size=1, **args)
        spec = upstream_generate(up_target, up_drafter, list(prompt.ids), block_size=block, **args)
        where = f"prompt {prompt.id}"
        assert ours["prompt_ids"] == list(prompt.ids), where
        assert ours["output_ids"] == ar.tokens, f"{where}: autoregressive tokens differ"
        assert ours["identical"] and spec.tokens == ar.tokens, f"{where}: speculative tokens"
        assert ours["acceptance"] == spec.acceptance, f"{where}: acceptance lengths differ"
        assert recorder.drafts == spec.drafts, f"{where}: drafts differ"
        assert ours["tau"] == round(sum(spec.acceptance) / len(spec.acceptance), 4), where
        ours_steps += ours["acceptance"]
        theirs_steps += spec.acceptance
    return {
        "prompts": len(prompts),
        "tau_kernels_ref": sum(ours_steps) / len(ours_steps),
        "tau_upstream": sum(theirs_steps) / len(theirs_steps),
    }


def test_builtin_pair_equals_zlab_step_for_step(builtin_pair) -> None:
    target_dir, drafter_dir = builtin_pair.target, builtin_pair.drafter
    tokenizer = load_tokenizer(target_dir)
    prompts = load_prompts(DEFAULT_PROMPTS, tokenizer, 264)
    table = assert_peer_equal(target_dir, drafter_dir, prompts)
    assert table["tau_upstream"] >= 3.0  # the trained drafter really drafts


def test_random_pair_reading_the_last_layer_equals_zlab(tmp_path: Path) -> None:
    # Layer 3 of 4 is the last: its features are post-norm on both sides (transformers'
    # `hidden_states[-1]`). Block 8 with budgets 1..64 exercises the short last block.
    target_dir, drafter_dir = random_pair(
        tmp_path, seed=7, target_layers=4, drafter_layers=2, block_size=8, layer_ids=(1, 3)
    )
    rng = random.Random(11)
    prompts = [
        Prompt(f"random-{n}", tuple(rng.randrange(256) for _ in range(length)), budget)
        for n, (length, budget) in enumerate([(1, 64), (5, 13), (17, 64), (40, 9), (3, 2)])
    ]
    prompts.append(Prompt("near-context", tuple(rng.randrange(256) for _ in range(110)), 64))
    # A stop token the target emits mid-block: the step's acceptance ends at it.
    target, drafter = load_upstream(target_dir, drafter_dir)
    free = upstream_generate(
        target, drafter, [65, 66], max_new_tokens=40, stop_ids=[], block_size=1
    ).tokens
    prompts.append(Prompt("stop", (65, 66), 40, frozenset({free[17]})))
    assert_peer_equal(target_dir, drafter_dir, prompts)
