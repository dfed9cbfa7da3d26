"""llama.cpp's DFlash engine on the built-in DFlash 2 pair (`fixtures make --dflash2`): the
checks of `test_llamacpp.py`'s servers (baseline vs `draft-dflash` server identical; llama.cpp's
per-position acceptance equal to kernels_ref's within the end-of-budget slack), run on the v2
drafter converted with llama.cpp's own converter (`--target-model-dir`)."""

from __future__ import annotations

import pytest

from dflash_guard.lossless.local import difftest_models
from dflash_guard.lossless.prompts import load_prompts
from kernels_ref.checkpoint import eos_token_ids
from kernels_ref.load import load_drafter, load_target
from kernels_ref.tokenizer import load_tokenizer
from tests.engine import test_llamacpp as v1
from tests.support.llamacpp import convert

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

# test_llamacpp's fixtures and server tests, run here on this module's `pair`.
engine, prompt_file, servers, endpoint_report = (
    v1.engine, v1.prompt_file, v1.servers, v1.endpoint_report
)
test_servers_identical = v1.test_dflash_server_matches_the_baseline_server
test_acceptance_agrees = v1.test_llamacpp_acceptance_agrees_with_kernels_ref


@pytest.fixture(scope="module")
def pair(dflash2_pair, tmp_path_factory):
    """(target, drafter, target.gguf, drafter.gguf, folder) of the built-in DFlash 2 pair."""
    folder = tmp_path_factory.mktemp("dflash2")
    target, drafter = dflash2_pair.target, dflash2_pair.drafter
    gguf = folder / "gguf"
    convert(target, gguf / "target.gguf")
    convert(drafter, gguf / "drafter.gguf", target_dir=target)
    return target, drafter, gguf / "target.gguf", gguf / "drafter.gguf", folder


def test_llamacpp_acceptance_equals_kernels_ref_exactly(endpoint_report, pair, prompt_file):
    """On this pair no prompt's last step is cut by the budget, so the engine and kernels_ref
    agree exactly (measured: 34 drafts, accepted per position 16/14/9/6/5/5/3, tau 2.706 on
    both; kernels_ref with the selector replaced by the logits' argmax gives 31 drafts and
    15/12/10/8/7/6/3, so the selector is what both sides run)."""
    target_dir, drafter_dir, _, _, _ = pair
    target = load_target(target_dir)
    tokenizer = load_tokenizer(target_dir)
    prompts = load_prompts(prompt_file, tokenizer, target.config.vocab_size, target_dir)
    report = difftest_models(target, load_drafter(drafter_dir, target), prompts,
                             stop_ids=eos_token_ids(target_dir), tokenizer=tokenizer,
                             max_new_tokens=v1.MAX_NEW_TOKENS)
    steps_by_accepted = {int(k) - 1: n for k, n in report.histogram.items()}
    ours = [sum(n for accepted, n in steps_by_accepted.items() if accepted > i)
            for i in range(report.block_size - 1)]
    acceptance = endpoint_report["acceptance"]
    assert acceptance["drafts"] == sum(steps_by_accepted.values())
    assert list(acceptance["accepted_per_position"]) == ours
    assert acceptance["mean_acceptance_length"] == pytest.approx(report.tau)
