"""Fixtures of the scan tests; the builders live in `tests/support/scan_builders.py`."""

from __future__ import annotations

import pytest

from tests.support.scan_builders import BENIGN_MODELING


@pytest.fixture
def benign_modeling() -> str:
    """A realistic, harmless modeling file (the shape of the DFlash drafter's code)."""
    return BENIGN_MODELING
