"""Fixtures for the audit tests (helpers: audit_support)."""

from __future__ import annotations

from pathlib import Path

import pytest
from audit_support import History, make_history


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    """One real git repository per test module (see `audit_support.History`)."""
    return make_history(tmp_path_factory.mktemp("engine") / "clone")


@pytest.fixture
def key_pair(tmp_path: Path) -> tuple[Path, Path]:
    from audit_support import make_key_pair

    return make_key_pair(tmp_path)
