"""Fixtures for the tests/cuda tests: the shipped pair loaded once, one torch thread."""

from __future__ import annotations

import pytest
import torch

from kernels_ref.drafter import load_drafter
from kernels_ref.fixtures import make_fixture_pair
from kernels_ref.model import load_target


@pytest.fixture(scope="session")
def cuda_fixture_dirs(tmp_path_factory: pytest.TempPathFactory):
    """The shipped trained pair's folders, written once per session."""
    return make_fixture_pair(tmp_path_factory.mktemp("cuda-fixture-pair"))


@pytest.fixture(scope="session")
def cpu_fixture_models(cuda_fixture_dirs):
    """The shipped pair loaded on the CPU in float32."""
    target = load_target(cuda_fixture_dirs[0])
    return target, load_drafter(cuda_fixture_dirs[1], target)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and the machine's cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
