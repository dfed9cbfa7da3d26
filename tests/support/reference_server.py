"""Run `python -m kernels_ref.serve` as a subprocess on a free 127.0.0.1 port (tests and
benchmarks)."""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def running_server(
    target: Path,
    drafter: Path | None = None,
    *,
    inject: str | None = None,
    startup_timeout: float = 120.0,
) -> Iterator[ServerProcess]:
    """Start `python -m kernels_ref.serve` on a free 127.0.0.1 port; stop it on exit."""
    command = [sys.executable, "-m", "kernels_ref.serve", "--target", str(target), "--port", "0"]
    if drafter is not None:
        command += ["--drafter", str(drafter)]
    if inject is not None:
        command += ["--inject", inject]
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    # stderr goes to a file, so a chatty server never blocks on a full pipe
    with tempfile.TemporaryFile(mode="w+") as errors:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=errors, text=True, env=env
        )
        try:
            yield ServerProcess(_await_ready(process, errors, startup_timeout), process)
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if process.stdout is not None:
                process.stdout.close()


@dataclass(frozen=True)
class ServerProcess:
    url: str
    process: subprocess.Popen[str]


def _await_ready(process: subprocess.Popen[str], errors: IO[str], timeout: float) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(timeout=0.5):
            line = process.stdout.readline()
            if line.startswith("READY "):
                return line.split()[1]
        if process.poll() is not None:
            errors.seek(0)
            raise RuntimeError(f"kernels_ref.serve exited: {errors.read().strip()[-500:]}")
    raise RuntimeError(f"kernels_ref.serve not ready within {timeout:g} s")
