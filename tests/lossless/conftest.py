"""Fixtures for the endpoint tests: a pair of fake engines started once per module."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.endpoint_fakes import Behaviour, make_app, serve


@dataclass
class FakePair:
    baseline_url: str
    candidate_url: str
    baseline: Behaviour
    candidate: Behaviour


@pytest.fixture(scope="module")
def _servers() -> Iterator[tuple[str, str, list[Behaviour]]]:
    holders = [Behaviour(), Behaviour()]

    class Proxy:
        """Forwards attribute access to whichever Behaviour the current test installed."""

        def __init__(self, index: int) -> None:
            self.index = index

        def __getattr__(self, name: str) -> Any:
            return getattr(holders[self.index], name)

        def __setattr__(self, name: str, value: Any) -> None:
            if name == "index":
                object.__setattr__(self, name, value)
            else:
                setattr(holders[self.index], name, value)

    with serve(make_app(Proxy(0))) as base, serve(make_app(Proxy(1))) as cand:  # type: ignore[arg-type]
        yield base, cand, holders


@pytest.fixture
def fake_pair(_servers: tuple[str, str, list[Behaviour]]) -> FakePair:
    """Two fake engines (started once per module) with fresh behaviour for this test."""
    base, cand, holders = _servers
    holders[0], holders[1] = Behaviour(), Behaviour()
    return FakePair(base, cand, holders[0], holders[1])
