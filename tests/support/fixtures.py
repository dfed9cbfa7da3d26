"""The fixtures every room shares, one per thing (a pytest plugin that `tests/conftest.py`
registers). The pairs and the reference servers are built once per session and are read-only: a
test that changes a file copies the folder first, and each pair's files are checked unchanged
when the session ends. `key_pair` is fresh for every test."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kernels_ref.fixtures import make_fixture_pair
from tests.support.reference_server import ServerProcess, running_server

if TYPE_CHECKING:
    from dflash_guard.pins.lockfile import Lockfile


@dataclass(frozen=True)
class ModelPair:
    """A target and a drafter folder."""

    target: Path
    drafter: Path

    @property
    def roots(self) -> dict[str, Path]:
        return {"target": self.target, "drafter": self.drafter}


@dataclass(frozen=True)
class LockedPair(ModelPair):
    """A pair with the lock of its two folders."""

    lock: Lockfile


@dataclass(frozen=True)
class ReferenceServers:
    """Two `kernels_ref.serve` engines on the built-in pair: an autoregressive baseline and a
    speculative candidate."""

    baseline: ServerProcess
    candidate: ServerProcess

    @property
    def urls(self) -> tuple[str, str]:
        return self.baseline.url, self.candidate.url


def _contents(pair: ModelPair) -> str:
    digest = hashlib.sha256()
    for folder in (pair.target, pair.drafter):
        for path in sorted(folder.rglob("*")):
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            if path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _read_only(pair: ModelPair) -> Iterator[ModelPair]:
    """Hand out `pair`; when the session ends, fail if any test changed its files."""
    before = _contents(pair)
    yield pair
    assert _contents(pair) == before, (
        f"a test changed the shared pair under {pair.target.parent}: copy it before changing it")


@pytest.fixture(scope="session")
def builtin_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelPair]:
    """The shipped trained pair (`fixtures make`)."""
    yield from _read_only(ModelPair(*make_fixture_pair(tmp_path_factory.mktemp("builtin-pair"))))


@pytest.fixture(scope="session")
def dflash2_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelPair]:
    """The built-in target with the built-in DFlash 2 drafter (`fixtures make --dflash2`)."""
    folder = tmp_path_factory.mktemp("dflash2-pair")
    yield from _read_only(ModelPair(*make_fixture_pair(folder, dflash2=True)))


@pytest.fixture(scope="session")
def padded_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelPair]:
    """The built-in pair zero-padded to head_dim 64 (`fixtures make --head-dim 64`)."""
    folder = tmp_path_factory.mktemp("padded-pair")
    yield from _read_only(ModelPair(*make_fixture_pair(folder, head_dim=64)))


def lock_pair(pair: ModelPair, cache: Path) -> LockedPair:
    """`pair` with the lock of its two local folders (no engine); `cache` is the stat cache
    to use, never the home one."""
    from dflash_guard.pins.resolve import build_lock

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH_GUARD_CACHE_DIR", str(cache))
        lock = build_lock({role: str(folder) for role, folder in pair.roots.items()}).lock
    assert lock is not None, f"{pair.target.parent} could not be locked"
    return LockedPair(pair.target, pair.drafter, lock)


@pytest.fixture(scope="session")
def locked_pair(builtin_pair: ModelPair, tmp_path_factory: pytest.TempPathFactory) -> LockedPair:
    """The built-in pair with its lock (local folders, no engine)."""
    return lock_pair(builtin_pair, tmp_path_factory.mktemp("locked-pair-cache"))


@pytest.fixture(scope="session")
def reference_servers(builtin_pair: ModelPair) -> Iterator[ReferenceServers]:
    """Reference engines on the built-in pair (subprocesses, seconds each to start), shared by
    every module; nothing may stop or pause them. Their Prometheus counters only grow: read
    them as differences, as the tools do."""
    with (running_server(builtin_pair.target) as baseline,
          running_server(builtin_pair.target, builtin_pair.drafter) as candidate):
        yield ReferenceServers(baseline, candidate)


@pytest.fixture
def key_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A fresh ECDSA P-256 signing key pair for this test: (private, public) PEM files."""
    from tests.support.trust import make_key_pair

    return make_key_pair(tmp_path)
