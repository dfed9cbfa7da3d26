"""Helpers for the hostile-input tests: the one-line-error contract and a FIFO guard."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


def one_line_error(result) -> str:
    """The stderr of a CLI run that must end in exit 2 with one readable line, unwrapped."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    return result.stderr.replace("\n", "")


@contextlib.contextmanager
def unblocking(fifo: Path) -> Iterator[None]:
    """Keep a test from hanging forever on a FIFO: while the block runs, a writer opens and
    closes `fifo` whenever a reader waits on it, so a blocked reader sees end-of-file (and the
    test fails on its assertion instead of hanging)."""
    done = threading.Event()

    def writer() -> None:
        while not done.wait(0.2):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                continue  # no reader yet (ENXIO) or the FIFO is gone

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
