"""Fixtures for the audit tests (helpers: tests/support/audit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.audit import History, make_history


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    """One real git repository per test module (see `tests.support.audit.History`)."""
    return make_history(tmp_path_factory.mktemp("engine") / "clone")


@pytest.fixture
def feed_key_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A fresh key pair for signing feeds (`feed-key.pem`, `feed-key.pub`)."""
    from tests.support.audit import make_key_pair

    return make_key_pair(tmp_path)
