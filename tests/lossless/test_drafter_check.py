"""The drafter check's verdicts: the engine's tau over the diff against kernels_ref's with the
locked drafter (the end-to-end checks, with a swapped drafter, are in test_reference_diff.py,
test_gate_endpoint.py and tests/engine/)."""

from __future__ import annotations

import math

import pytest

from dflash_guard.lossless.drafter_check import MIN_TAU_RATIO, DrafterCheck


def test_an_engine_drafting_like_the_locked_drafter_passes():
    check = DrafterCheck(reference_tau=3.0, engine_tau=3.3)
    assert check.passed and check.reason() is None
    assert check.to_json() == {"passed": True, "reference_tau": 3.0, "engine_tau": 3.3,
                               "ratio": 1.1, "min_ratio": MIN_TAU_RATIO}


def test_an_engine_whose_drafts_are_rejected_is_not_drafting_with_the_locked_drafter():
    check = DrafterCheck(reference_tau=3.0, engine_tau=1.05)
    assert not check.passed
    assert (check.reason() or "").startswith("the engine does not draft like the locked drafter: "
                                             "its mean acceptance length over the diff is 1.05")


@pytest.mark.parametrize("engine_tau", [None, math.nan, math.inf])
def test_no_drafts_or_a_figure_that_is_not_a_number_proves_nothing(engine_tau):
    check = DrafterCheck(reference_tau=3.0, engine_tau=engine_tau)
    assert not check.passed
    assert "cannot be shown to draft with the locked drafter" in (check.reason() or "")
    assert check.to_json()["passed"] is False
