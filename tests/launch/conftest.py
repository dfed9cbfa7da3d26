"""Fixtures of the launch tests: the head_dim-64 pair with its lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_guard.pins.resolve import build_lock
from kernels_ref.fixtures import make_fixture_pair
from tests.support.trust import write_lock


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    """The head_dim-64 pair and its lock."""
    root = tmp_path_factory.mktemp("launch")
    target, drafter = make_fixture_pair(root / "pair", head_dim=64)
    lock = write_lock(build_lock({"target": str(target), "drafter": str(drafter)}).lock,
                      root / "pair.lock")
    return target, drafter, lock
