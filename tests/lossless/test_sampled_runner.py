"""`dflash-guard difftest sampled`: the reference runner's sampled decoding, end to end."""

from __future__ import annotations

import json

import pytest

from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.sampling import SamplingParams


@pytest.fixture(scope="module")
def one_prompt(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "one.jsonl"
    # A prompt where the fixture drafter's guess is accepted about a third of the time: many
    # rejections of plausible tokens, where a biased resampler shows.
    path.write_text(json.dumps({"id": "repr", "prompt": "    def __repr__(self):\n        return "})
                    + "\n")
    return path


@pytest.mark.parametrize(
    ("inject", "exit_code"),
    [(None, 0), ("resample-from-p", 1), ("reuse-accept-uniform", 1)],
)
def test_sampled_runner_cli_exact_passes_biased_fails(cli, builtin_pair, one_prompt, inject,
                                                      exit_code):
    """Top-k 3 keeps each position to a few outcomes, so 400 draws give the test power."""
    target, drafter = builtin_pair.target, builtin_pair.drafter
    args = ["difftest", "sampled", "--target", target, "--drafter", drafter,
            "--prompts", one_prompt, "--samples", "400", "--sample-tokens", "3",
            "--temperature", "1.5", "--top-k", "3", "--format", "json"]
    result = cli(*args, *(["--inject", inject] if inject else []))
    assert result.exit_code == exit_code, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is (exit_code == 0)
    (prompt,) = report["results"]
    assert prompt["mean_accepted"] > 0  # the candidate side really speculated


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--inject", "reuse-draft-uniforms"), "drafts greedily"),
        (("--inject", "stale-kv"), "sampler faults only"),
        (("--temperature", "0"), "temperature above 0"),
        (("--device", "nonesuch"), "unknown device"),  # was an internal error before
    ],
)
def test_sampled_runner_cli_refuses_bad_settings(cli, builtin_pair, one_prompt, extra, message):
    target, drafter = builtin_pair.target, builtin_pair.drafter
    result = cli("difftest", "sampled", "--target", target, "--drafter", drafter,
                 "--prompts", one_prompt, "--samples", "5", *extra)
    assert result.exit_code == 2 and message in result.stderr


def test_sampled_runner_greedy_path_is_untouched(builtin_pair):
    target_dir, drafter_dir = builtin_pair.target, builtin_pair.drafter
    target = load_target(target_dir)
    drafter = load_drafter(drafter_dir, target)
    prompt = list(b"def mean(data):\n")
    plain = generate(target, drafter, prompt, max_new_tokens=12, stop_ids=frozenset())
    greedy = generate(target, drafter, prompt, max_new_tokens=12, stop_ids=frozenset(),
                      sampling=SamplingParams(temperature=0), seed=5)
    assert plain == greedy
    hot = SamplingParams(temperature=1.5)
    draws = {tuple(generate(target, drafter, prompt, max_new_tokens=6, stop_ids=frozenset(),
                            sampling=hot, seed=s).tokens) for s in range(6)}
    again = generate(target, drafter, prompt, max_new_tokens=6, stop_ids=frozenset(),
                     sampling=hot, seed=0).tokens
    assert len(draws) > 1  # different seeds, different samples
    assert tuple(again) in draws  # the same seed, the same sample


def test_sampled_runner_takes_any_seed(builtin_pair):
    """A seed past 2**64 (the runner derives one per draw from --seed) was an internal error."""
    target = load_target(builtin_pair.target)
    drafter = load_drafter(builtin_pair.drafter, target)
    args = dict(max_new_tokens=6, stop_ids=frozenset(), sampling=SamplingParams(temperature=1.5))
    prompt = list(b"def mean(data):\n")
    assert generate(target, drafter, prompt, seed=2**70 + 3, **args) == generate(
        target, drafter, prompt, seed=3, **args
    )
