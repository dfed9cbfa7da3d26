"""Fixtures of the launch tests: the lock of the head_dim-64 pair (`padded_pair`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fixtures import ModelPair, lock_pair
from tests.support.trust import write_lock


@pytest.fixture(scope="module")
def padded_lock(padded_pair: ModelPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lockfile of the head_dim-64 pair."""
    root = tmp_path_factory.mktemp("launch")
    return write_lock(lock_pair(padded_pair, root / "cache").lock, root / "pair.lock")
