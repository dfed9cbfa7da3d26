"""Sampled speculative decoding is exact, and the statistical check catches biased samplers."""

from __future__ import annotations

import math

import pytest
import torch

from dflash_guard.lossless.sampled import check_sampled, chi2_sf, homogeneity_test
from kernels_ref.faults import Fault
from kernels_ref.sampling import (
    SamplingParams,
    draft_block,
    probs_from_logits,
    verify_block,
)
from tests.support.sampled_toys import MarkovPair

PROMPTS = [("one", [1]), ("two", [2, 3])]
ALPHA = 0.01


@pytest.fixture(scope="module")
def markov_pair() -> MarkovPair:
    return MarkovPair()


def test_sampled_chi2_survival_matches_known_quantiles():
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(9.210340371976184, 2) == pytest.approx(0.01, rel=1e-6)  # exp(-x/2) for 2 dof
    assert chi2_sf(23.209251158954356, 10) == pytest.approx(0.01, rel=1e-6)
    assert chi2_sf(0.0, 3) == 1.0


def test_sampled_homogeneity_test_separates_distributions():
    g = torch.Generator().manual_seed(0)
    same = torch.randint(0, 4, (4000, 2), generator=g)
    other = torch.randint(0, 4, (4000, 2), generator=g)
    assert homogeneity_test(same, other).p_value > 0.001
    skewed = other.clone()
    skewed[:400, 0] = 0  # move 10% of the mass
    result = homogeneity_test(same, skewed)
    assert result.p_value < 1e-6 and result.tv_distance > 0.05


def test_sampled_probs_temperature_top_k_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    assert probs_from_logits(logits, SamplingParams(temperature=0)).tolist() == [[1, 0, 0, 0]]
    hot = probs_from_logits(logits, SamplingParams(temperature=2.0))
    assert hot[0, 0] / hot[0, 1] == pytest.approx(math.exp(0.5))
    top2 = probs_from_logits(logits, SamplingParams(top_k=2))
    assert (top2[0, 2:] == 0).all() and top2.sum() == pytest.approx(1.0)
    base = probs_from_logits(logits, SamplingParams())[0]
    nucleus = probs_from_logits(logits, SamplingParams(top_p=float(base[0]) + 1e-6))[0]
    assert (nucleus > 0).tolist() == [True, True, False, False]
    with pytest.raises(ValueError):
        SamplingParams(top_p=0.0)


def test_sampled_greedy_draft_uses_no_drafting_randomness():
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    tokens, q, uniforms = draft_block(torch.randn(5, 3, 7), SamplingParams(), g)
    assert q is None and uniforms is None and torch.equal(g.get_state(), state)


def test_sampled_verify_block_accepts_a_perfect_draft_in_full():
    p = torch.softmax(torch.randn(100, 4, 5, generator=torch.Generator().manual_seed(1)), -1)
    draft = p[:, :3].argmax(-1)
    sure = torch.nn.functional.one_hot(draft, 5).double()
    p_sure = torch.cat([sure, p[:, 3:]], dim=1)  # the target agrees with certainty
    verdict = verify_block(p_sure, draft, None, torch.Generator().manual_seed(2))
    assert (verdict.accepted == 3).all()


@pytest.mark.parametrize(
    ("params", "greedy_draft"),
    [
        (SamplingParams(), True),
        (SamplingParams(), False),
        (SamplingParams(temperature=0.7, top_k=3), True),
        (SamplingParams(temperature=1.3, top_p=0.8), False),
    ],
)
def test_sampled_exact_sampler_passes(markov_pair, params, greedy_draft):
    report = check_sampled(markov_pair, PROMPTS, samples=6000, tokens=3, params=params,
                           greedy_draft=greedy_draft, alpha=ALPHA, seed=11)
    assert report.passed, [r.test.p_value for r in report.results]
    assert report.per_test_alpha == pytest.approx(ALPHA / (len(PROMPTS) * 4))
    assert all(len(r.positions) == 3 for r in report.results)
    assert all(r.mean_accepted > 0 for r in report.results)  # speculation actually ran


@pytest.mark.parametrize(
    ("fault", "greedy_draft"),
    [(fault, False) for fault in Fault if fault.sampling]
    + [(fault, True) for fault in Fault if fault.sampling and fault.runner],
)
def test_sampled_planted_biased_sampler_fails(markov_pair, fault, greedy_draft):
    report = check_sampled(markov_pair, PROMPTS, samples=6000, tokens=3, greedy_draft=greedy_draft,
                           alpha=ALPHA, seed=11, inject=fault)
    assert not report.passed
    assert report.to_json()["passed"] is False


def test_sampled_false_alarm_rate_within_binomial_bound(markov_pair):
    seeds = 20
    # The largest count of false alarms that 20 honest runs at level ALPHA exceed with
    # probability under 0.5%: more than this means the check is miscalibrated.
    tail = 1.0
    bound = -1
    while tail >= 0.005:
        bound += 1
        tail -= math.comb(seeds, bound) * ALPHA**bound * (1 - ALPHA) ** (seeds - bound)
    alarms = 0
    for seed in range(seeds):
        report = check_sampled(markov_pair, PROMPTS, samples=3000, tokens=2, alpha=ALPHA,
                               seed=100 + seed, greedy_draft=seed % 2 == 0)
        alarms += not report.passed
    assert bound == 2
    assert alarms <= bound
