"""`run_difftest` catches every planted engine bug on the default prompt set, and stays quiet
on the clean pair; an oracle drafter (future leakage) is flagged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dflash_guard.lossless.local import (
    DEFAULT_PROMPTS,
    default_stop_ids,
    difftest_models,
    load_prompts,
    run_difftest,
)
from dflash_guard.lossless.options import LocalOptions
from kernels_ref.faults import Fault
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.tokenizer import load_tokenizer
from tests.support.fixtures import ModelPair

# Each fault with the default prompts that catch it: a subset keeps the suite fast, and a
# subset that diverges proves the whole default set diverges too.
OUTPUT_FAULTS = {
    Fault.ACCEPT_OFF_BY_ONE: ["code-function"],
    Fault.NO_CUMPROD: ["code-function"],
    Fault.STALE_KV: ["code-function"],
    Fault.SKIP_BONUS: ["code-function"],
    Fault.DROP_MASK_ID: ["mask-token-in-output"],
    Fault.MISSED_STOP: ["stop-newline-in-block", "stop-paren-in-block"],
}
ACCEPTANCE_FAULTS = [Fault.SEQ_INFLATION, Fault.HIDDEN_OFFSET]  # lossless: only acceptance drops
ACCEPTANCE_PROMPTS = ["code-function", "code-class", "math-loop", "repetition-words"]


def default_subset(tmp_path: Path, ids: list[str]) -> Path:
    """The lines of the default prompt set with these ids, as a prompt file."""
    lines = [
        line for line in DEFAULT_PROMPTS.read_text().splitlines() if json.loads(line)["id"] in ids
    ]
    assert len(lines) == len(ids)
    path = tmp_path / "subset.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def local(pair: ModelPair, **options: Any) -> LocalOptions:
    """A local diff test of `pair`'s two folders."""
    return LocalOptions(pair.target, pair.drafter, **options)


@pytest.fixture(scope="module")
def clean_report(builtin_pair: ModelPair):
    return run_difftest(local(builtin_pair))


def test_clean_pair_is_identical_and_quiet(clean_report) -> None:
    assert clean_report.identical
    assert clean_report.warnings == []
    assert clean_report.tau > 2.0
    assert len(clean_report.results) >= 10
    overall = clean_report.to_json()["overall"]
    assert overall["forwards_saved"] > 0
    steps = sum(r.speculation.steps for r in clean_report.results)
    assert sum(overall["histogram"].values()) == steps
    assert set(overall["histogram"]) == {str(n) for n in range(1, 9)}


@pytest.mark.parametrize("fault", sorted(OUTPUT_FAULTS))
def test_output_fault_makes_difftest_fail(
    builtin_pair: ModelPair, tmp_path: Path, fault: str
) -> None:
    prompts = default_subset(tmp_path, OUTPUT_FAULTS[fault])
    report = run_difftest(local(builtin_pair, prompts=prompts, inject=fault))
    assert not report.identical
    assert {d.prompt_id for d in report.divergences} == set(OUTPUT_FAULTS[fault])
    first = report.divergences[0].divergence
    assert first.position is not None
    assert first.reference_token != first.candidate_token
    assert first.margin is None or first.margin > 0
    assert not first.near_tie  # a logic bug, not a rounding tie
    clean = run_difftest(local(builtin_pair, prompts=prompts))
    assert clean.identical  # the clean path passes


@pytest.mark.parametrize("fault", ACCEPTANCE_FAULTS)
def test_acceptance_fault_is_flagged(
    builtin_pair: ModelPair, tmp_path: Path, fault: str
) -> None:
    prompts = default_subset(tmp_path, ACCEPTANCE_PROMPTS)
    report = run_difftest(local(builtin_pair, prompts=prompts, inject=fault))
    assert report.identical  # the target still verifies every token
    clean = run_difftest(local(builtin_pair, prompts=prompts))
    assert report.tau_reference == pytest.approx(clean.tau)
    assert report.tau < 0.95 * clean.tau
    assert any("below the clean reference" in w for w in report.warnings)
    assert not clean.warnings


class OracleDrafter:
    """A drafter that 'sees the future': it proposes the target's own greedy continuation."""

    def __init__(self, config, continuations: dict[tuple[int, ...], list[int]]) -> None:
        self.config = config
        self.continuations = continuations
        self.prompt: tuple[int, ...] = ()

    def new_cache(self, max_len: int | None = None) -> None:
        return None

    def extend_context(self, cache, features, positions) -> None:
        return None

    def propose(self, cache, target, anchor, start, n) -> list[int]:
        sequence = [*self.prompt, *self.continuations[self.prompt]]
        return (sequence[start + 1 : start + 1 + n] + [0] * n)[:n]


def test_future_leakage_is_flagged(builtin_pair: ModelPair) -> None:
    target = load_target(builtin_pair.target)
    drafter = load_drafter(builtin_pair.drafter, target)
    tokenizer = load_tokenizer(builtin_pair.target)
    prompts = load_prompts(DEFAULT_PROMPTS, tokenizer, target.config.vocab_size)[:3]
    stops = default_stop_ids(builtin_pair.target)
    truth = {
        p.ids: generate(
            target, None, list(p.ids), max_new_tokens=64, stop_ids=stops | p.stop_ids
        ).tokens
        for p in prompts
    }
    oracle = OracleDrafter(drafter.config, truth)
    results = []
    for prompt in prompts:  # one prompt at a time, so the oracle knows which future to leak
        oracle.prompt = prompt.ids
        results.append(
            difftest_models(target, oracle, [prompt], stop_ids=stops, tokenizer=tokenizer)
        )
    assert all(r.identical for r in results)
    assert any("leaking into the draft" in w for r in results for w in r.warnings)
    honest = difftest_models(target, drafter, prompts, stop_ids=stops, tokenizer=tokenizer)
    assert not any("leaking" in w for w in honest.warnings)
