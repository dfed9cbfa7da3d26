"""Fixtures for the kernels_ref tests: the shipped pair loaded once on the CPU, and z-lab's
timer on the CPU."""

from __future__ import annotations

import pytest

from kernels_ref.load import load_drafter, load_target


@pytest.fixture(scope="session")
def cpu_fixture_models(builtin_pair):
    """The shipped pair loaded on the CPU in float32."""
    target = load_target(builtin_pair.target)
    return target, load_drafter(builtin_pair.drafter, target)


@pytest.fixture
def cpu_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """z-lab's timer synchronises CUDA; on the CPU a plain clock does (for the peer tests)."""
    import time

    from dflash import model as zlab

    monkeypatch.setattr(zlab, "_cuda_time", time.perf_counter)
