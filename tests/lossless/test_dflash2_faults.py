"""`--inject` on a DFlash 2 pair: every greedy fault gets the verdict it gets on the v1 pair,
and the DFlash 2 fault (`selector-no-unary`) keeps outputs identical while the acceptance report
flags the drop."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.lossless.local import run_difftest
from kernels_ref.faults import Fault
from tests.lossless.test_difftest_faults import (
    ACCEPTANCE_FAULTS,
    ACCEPTANCE_PROMPTS,
    OUTPUT_FAULTS,
    default_subset,
    local,
)


@pytest.fixture(scope="module")
def acceptance_prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return default_subset(tmp_path_factory.mktemp("prompts"), ACCEPTANCE_PROMPTS)


@pytest.fixture(scope="module")
def clean_v2(dflash2_pair, acceptance_prompts):
    return run_difftest(local(dflash2_pair, prompts=acceptance_prompts))


def test_every_greedy_fault_is_covered() -> None:
    v1_only = {fault for fault in Fault if fault.greedy and not fault.dflash2_only}
    assert v1_only == set(OUTPUT_FAULTS) | set(ACCEPTANCE_FAULTS)


@pytest.mark.parametrize("fault", sorted(OUTPUT_FAULTS))
def test_output_fault_fails_on_dflash2(dflash2_pair, tmp_path: Path, fault: Fault) -> None:
    prompts = default_subset(tmp_path, OUTPUT_FAULTS[fault])
    report = run_difftest(local(dflash2_pair, prompts=prompts, inject=fault))
    assert not report.identical
    assert {d.prompt_id for d in report.divergences} == set(OUTPUT_FAULTS[fault])
    assert not report.divergences[0].divergence.near_tie
    assert run_difftest(local(dflash2_pair, prompts=prompts)).identical


@pytest.mark.parametrize("fault", [*ACCEPTANCE_FAULTS, Fault.SELECTOR_NO_UNARY])
def test_acceptance_fault_is_flagged_on_dflash2(
    dflash2_pair, acceptance_prompts, clean_v2, fault: Fault
) -> None:
    report = run_difftest(local(dflash2_pair, prompts=acceptance_prompts, inject=fault))
    assert report.identical  # the target still verifies every token
    assert report.tau_reference == pytest.approx(clean_v2.tau)
    assert report.tau < 0.95 * clean_v2.tau
    assert any("below the clean reference" in w for w in report.warnings)
    assert not clean_v2.warnings


def test_the_dflash2_fault_is_refused_on_a_v1_drafter(builtin_pair, acceptance_prompts) -> None:
    fault = Fault.SELECTOR_NO_UNARY
    options = local(builtin_pair, prompts=acceptance_prompts, inject=fault)
    with pytest.raises(InputError, match="needs a DFlash 2 drafter"):
        run_difftest(options)
