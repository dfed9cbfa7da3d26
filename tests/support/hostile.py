"""Helpers for the hostile-input tests: the one-line-error contract, a FIFO guard, deep folders
and the GGUF of attack N24."""

from __future__ import annotations

import contextlib
import os
import struct
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


def deep_folder(base: Path, depth: int) -> Path:
    """`base/d/d/.../d`, `depth` levels, with a file at the bottom, made through directory
    descriptors (the full path is longer than PATH_MAX); returns `base`. Remove it with
    `remove_deep_folder`: `shutil.rmtree` (and so pytest's tmp cleanup) recurses once per level
    and fails on it."""
    base.mkdir()
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        file_fd = os.open("hidden.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(file_fd, b"not checked")
        os.close(file_fd)
    finally:
        os.close(fd)
    return base


def remove_deep_folder(base: Path) -> None:
    """Remove a `deep_folder` chain without recursion: lift `base/d/d` to `base/d` one level at
    a time (every path stays short), then remove what is left."""
    import shutil

    lifted = base / ".lifted"
    while (base / "d" / "d").is_dir():
        os.rename(base / "d" / "d", lifted)
        shutil.rmtree(base / "d")
        os.rename(lifted, base / "d")
    shutil.rmtree(base)


def n24_gguf(path: Path, tokens: int = 3_000_000) -> Path:
    """Attack N24 (2026-12-01): a GGUF of `tokens` one-byte tokens (27 MB for 3,000,000)."""

    def string(text: bytes) -> bytes:
        return struct.pack("<Q", len(text)) + text

    with path.open("wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 2))
        out.write(string(b"general.architecture") + struct.pack("<I", 8) + string(b"llama"))
        out.write(string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, tokens))
        out.write(string(b"a") * tokens)
    return path
