"""Fixtures for the policy, signing, provenance and gate tests (helpers: policy_support)."""

from __future__ import annotations

from pathlib import Path

import pytest
from policy_support import Pair, make_key_pair


@pytest.fixture
def key_pair(tmp_path: Path) -> tuple[Path, Path]:
    return make_key_pair(tmp_path)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    from dflash_guard.pins.resolve import build_lock
    from kernels_ref.fixtures import make_fixture_pair

    base = tmp_path_factory.mktemp("pair")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH_GUARD_CACHE_DIR", str(base / "cache"))
        target, drafter = make_fixture_pair(base / "fixtures")
        lock = build_lock({"target": str(target), "drafter": str(drafter)}).lock
    return Pair(base, target, drafter, lock)


@pytest.fixture(autouse=True)
def _private_stat_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never write dflash-guard's stat cache under the home folder during tests."""
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / ".dflash-guard-cache"))
