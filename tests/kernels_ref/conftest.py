"""Fixtures for the kernels_ref tests: the shipped pair loaded once on the CPU."""

from __future__ import annotations

import pytest

from kernels_ref.load import load_drafter, load_target


@pytest.fixture(scope="session")
def cpu_fixture_models(builtin_pair):
    """The shipped pair loaded on the CPU in float32."""
    target = load_target(builtin_pair.target)
    return target, load_drafter(builtin_pair.drafter, target)
