"""Fixtures of the scan tests; the builders live in `scan_builders.py`."""

from __future__ import annotations

import pytest
from scan_builders import BENIGN_MODELING


@pytest.fixture
def benign_modeling() -> str:
    """A realistic, harmless modeling file (the shape of the DFlash drafter's code)."""
    return BENIGN_MODELING
