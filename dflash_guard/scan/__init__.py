"""`dflash-guard scan`: never load what has not been scanned.

One module per detector (`pickles`, `safetensors_check`, `gguf_check`, `templates` and its
jinja2 check `template_check`, `remote_code`, `drafter_config`), the rules from
`dflash_guard.rules`, the finding type in `dflash_guard.findings`, the walk in `runner` and the
report in `report` (rendered by `dflash_guard.formats`). Helpers: `regular` (never opening a FIFO
or device), `pickle_stream` (the opcode walk), `pickle_globals` (allowlists), `modelscan_pass`,
`containers` (zip, tar and compressed streams), `payloads` (serialized objects hidden in
strings), `sniff`, `jsonfile`; GGUF headers are read by `kernels_ref.gguf_reader`, the one
bounded GGUF reader.
Heavy libraries (modelscan, jinja2, gguf, numpy) load only when a file needs them, and importing
one detector does not load the runner (`scan_paths` and `ScanReport` load on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dflash_guard.scan.report import ScanReport
    from dflash_guard.scan.runner import scan_paths

__all__ = ["ScanReport", "scan_paths"]


def __getattr__(name: str) -> object:
    """`scan_paths` and `ScanReport`, imported on first use (PEP 562)."""
    if name == "scan_paths":
        from dflash_guard.scan.runner import scan_paths

        return scan_paths
    if name == "ScanReport":
        from dflash_guard.scan.report import ScanReport

        return ScanReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
