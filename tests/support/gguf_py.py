"""gguf-py, the reference GGUF library, as the tests use it: its reader over a plain ndarray
view of the mapped file, and its `gguf_new_metadata` script run in this process with that
reader.

gguf-py's `GGUFReader` slices the file once per item; numpy's `memmap` subclass made each slice
cost about three times as much (a vocabulary GGUF's 150k-token arrays took a minute or more).
The parse is gguf-py's, unchanged, on the same bytes: only the array class differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.scripts import gguf_new_metadata


class GGUFPyReader(gguf.GGUFReader):
    """gguf-py's reader over a plain ndarray view of the mapped file."""

    @property
    def data(self) -> np.ndarray:
        return self._plain

    @data.setter
    def data(self, mapped: np.ndarray) -> None:
        self._plain = np.asarray(mapped)  # a view of the same mapping, not a memmap


def new_metadata(source: Path, out: Path, *args: str) -> Path:
    """`gguf_new_metadata SOURCE OUT ARGS... --force`, in this process over `GGUFPyReader`
    (the same bytes as the script run on its own, checked on a real vocabulary GGUF)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", GGUFPyReader)
        patch.setattr(sys, "argv", ["gguf_new_metadata", str(source), str(out), *args,
                                    "--force"])
        gguf_new_metadata.main()
    return out
