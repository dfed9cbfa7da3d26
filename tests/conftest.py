"""Shared test helpers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dflash_guard._cli import main

SHARED_VECTORS = Path(__file__).resolve().parents[1].parent / "shared" / "vectors"


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
    """The `../shared/vectors` folder; tests that need it skip with a reason when it is absent."""
    if not SHARED_VECTORS.is_dir():
        pytest.skip(f"shared test vectors not found at {SHARED_VECTORS}")
    return SHARED_VECTORS
