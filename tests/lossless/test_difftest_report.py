"""Prompt sets, the target's tokenizer, and the acceptance warnings of the difftest report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.lossless.local import (
    DEFAULT_PROMPTS,
    Prompt,
    compare,
    default_stop_ids,
    difftest_models,
    load_prompts,
)
from dflash_guard.lossless.result import Divergence
from kernels_ref.errors import RunnerError
from kernels_ref.fixtures import EOS_ID, MASK_ID, TARGET_CONFIG
from kernels_ref.load import load_drafter, load_target
from kernels_ref.loop import Generation
from kernels_ref.tokenizer import load_tokenizer
from tests.support.fixtures import ModelPair
from tests.support.kernels import random_pair


def test_fixture_tokenizer_round_trips(builtin_pair: ModelPair) -> None:
    tokenizer = load_tokenizer(builtin_pair.target)
    assert tokenizer is not None
    text = "déf f(x):\n\treturn x  # ünïcode"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.decode([104, 105, EOS_ID, MASK_ID]) == "hi<|endoftext|><|mask|>"
    assert tokenizer.token_id("\n") == 10
    assert tokenizer.token_id("<|endoftext|>") == EOS_ID
    assert tokenizer.token_id("ab") is None
    data = json.loads((builtin_pair.target / "tokenizer.json").read_text())
    assert data["model"]["type"] == "BPE" and len(data["model"]["vocab"]) == 256
    assert default_stop_ids(builtin_pair.target) == {EOS_ID}


def test_targets_without_a_tokenizer_need_prompt_ids(tmp_path: Path) -> None:
    target_dir, _ = random_pair(tmp_path, seed=1)
    (target_dir / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece"}}))
    with pytest.raises(RunnerError, match="not a tokenizers file"):
        load_tokenizer(target_dir)
    (target_dir / "tokenizer.json").unlink()
    assert load_tokenizer(target_dir) is None
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "hello"}\n')
    with pytest.raises(InputError, match="give 'prompt_ids'"):
        load_prompts(prompts, None, 264)
    prompts.write_text('{"id": "a", "prompt_ids": [1, 2], "stop": [10]}\n')
    assert load_prompts(prompts, None, 264) == [Prompt("a", (1, 2), None, frozenset({10}))]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "a", "prompt": "x", "prompt_ids": [1]}', "exactly one of"),
        ('{"id": "a", "prompt_ids": [1, 999]}', "outside the vocabulary"),
        ('{"id": "a", "prompt": ""}', "empty"),
        ('{"id": "a", "prompt": "x", "stop": ["ab"]}', "not a single token"),
        ('{"id": "a", "prompt": "x", "max_new_tokens": 0}', "positive integer"),
        ('{"prompt": "x"}', "string 'id'"),
        ("not json", "not valid JSON"),
        ('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}', "not unique"),
        ('{"id": "a", "prompt_ids": [true]}', "p.jsonl:1: 'prompt_ids' must be a list of integers"),
        ('{"id": "a", "text": "x"}', "p.jsonl:1: unknown field 'text'"),
        ('{"id": "a", "prompt": "x"}\n\n{"id": "b", "prompt": "x", "stop": [1.5]}',
         "p.jsonl:3: 'stop' must be a list"),
        ('{"id": "a", "prompt_ids": [1, 999]}', "p.jsonl:1: the prompt is empty or has ids"),
    ],
)
def test_malformed_prompt_files_are_refused(
    tmp_path: Path, line: str, message: str, builtin_pair: ModelPair
) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(InputError, match=message):
        load_prompts(path, load_tokenizer(builtin_pair.target), 264)


def test_default_prompt_set_covers_the_required_cases(builtin_pair: ModelPair) -> None:
    prompts = load_prompts(DEFAULT_PROMPTS, load_tokenizer(builtin_pair.target), 264)
    limit = TARGET_CONFIG["max_position_embeddings"]
    assert any(len(p.ids) == 1 for p in prompts)
    assert any(limit - 64 < len(p.ids) < limit for p in prompts)
    assert any(p.stop_ids for p in prompts)
    assert any(MASK_ID in p.ids for p in prompts)
    assert {"code", "math", "prose", "repetition"} <= {p.id.split("-")[0] for p in prompts}


def test_collapsed_acceptance_and_mask_as_stop_are_flagged(tmp_path: Path) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, seed=2)  # an untrained drafter: tau ~ 1
    target = load_target(target_dir)
    drafter = load_drafter(drafter_dir, target)
    prompts = [Prompt("a", (1, 2, 3)), Prompt("b", (40, 41))]
    report = difftest_models(target, drafter, prompts, stop_ids=frozenset(), max_new_tokens=16)
    assert report.identical
    assert report.tau < 1.25
    assert any("near 1" in w for w in report.warnings)
    aliased = difftest_models(
        target, drafter, prompts, stop_ids=frozenset({MASK_ID}), max_new_tokens=4
    )
    assert any("also a stop token" in w for w in aliased.warnings)


def test_divergence_reports_position_tokens_and_near_tie() -> None:
    ar = Generation(tokens=[5, 6, 7], steps=[], margins=[2.0, 0.01, 3.0])
    p = Prompt("p", (1,))
    tie = compare(ar, Generation([5, 9, 7], [], []), p, None, 8, near_tie_margin=0.125)
    assert tie.divergence == Divergence(1, 6, 9, 0.01, near_tie=True)
    assert tie.status == "near-tie"
    bug = compare(ar, Generation([4], [], []), p, None, 8, near_tie_margin=0.125)
    assert bug.divergence == Divergence(0, 5, 4, 2.0, near_tie=False)
    assert bug.status == "hard"
    short = compare(ar, Generation([5, 6], [], []), p, None, 8)
    assert short.divergence == Divergence(2, 7, None, 3.0)
    assert compare(ar, Generation([5, 6, 7], [], []), p, None, 8).identical
