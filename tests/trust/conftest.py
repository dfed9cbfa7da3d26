"""Fixtures for the policy, signing, provenance and gate tests (helpers: tests/support/trust.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.trust import Pair, make_key_pair


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
