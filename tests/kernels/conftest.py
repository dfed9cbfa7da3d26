"""Fixtures for the kernels_ref and difftest tests: the shipped pair, one torch thread."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels_ref.fixtures import make_fixture_pair


@pytest.fixture(scope="session")
def fixture_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The shipped trained pair, written once per session."""
    return make_fixture_pair(tmp_path_factory.mktemp("fixture-pair"))


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and the machine's cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
