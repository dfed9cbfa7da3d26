"""Fixtures every test folder shares: the CLI runner, the test vectors (`tests/vectors`), and
isolation (one torch thread, a private stat cache). The shared pairs and servers come from the
`tests.support.fixtures` plugin; helper modules live in `tests/support/`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from dflash_guard._cli import main

pytest_plugins = ["tests.support.fixtures", "tests.support.hub_fixtures"]  # shared by rooms

VECTORS = Path(__file__).resolve().parent / "vectors"  # third-party test data, licences beside it


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest work first: the modules marked `vllm` (each starts 3-GB vLLM servers, a minute or
    more each), the other engine modules, the other slow tests, then the rest (each group in
    collection order). `make test` runs three pytest-xdist workers that take a module at a time in
    this order (`--dist loadfile --no-loadscope-reorder`), so the long modules overlap instead of
    one worker running them alone at the end."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("vllm"):
            return 0
        if item.nodeid.startswith("tests/engine/"):
            return 1
        return 2 if item.get_closest_marker("slow") else 3

    items.sort(key=rank)  # stable: the collection order within each group


@dataclasses.dataclass
class CliResult:
    """What one in-process run of the CLI returned."""

    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Run `dflash-guard ARGS...` in-process, exactly as the console script does."""

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


@pytest.fixture
def shared_vectors() -> Path:
    """`tests/vectors`: files from other projects' test suites, carried in the repository with
    their licences (see its README), so no test depends on a folder outside the clone."""
    assert VECTORS.is_dir(), f"test vectors missing at {VECTORS}"
    return VECTORS


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and the machine's cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _private_stat_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never write dflash-guard's stat cache or its key under the home folder during tests."""
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / ".dflash-guard-cache"))
    monkeypatch.setenv("DFLASH_GUARD_STATE_DIR", str(tmp_path / ".dflash-guard-state"))
