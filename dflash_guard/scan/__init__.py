"""`dflash-guard scan`: never load what has not been scanned.

The walk is `runner` (it routes each file, in an explicit order, to its room), `sniff` and
`allowlist` (a file passes only when positively identified and parsed whole); what it returns is
a `ScanReport` (`dflash_guard.findings`, on the floor the judge and the formats read). The
rooms: `weights/` (does it parse whole), `pickle/` (does it unpickle), `code/` (does it import
code), `drafter` (does the drafter fit its target). Findings are `dflash_guard.findings`, rules
`dflash_guard.rules`, chat templates `dflash_guard.templates`; files are read through
`dflash_guard.fileio`. Heavy libraries (modelscan, jinja2, gguf, numpy) load only when a file
needs them, and importing one detector does not load the runner (`scan_paths` loads on first
use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_guard.findings import ScanReport

if TYPE_CHECKING:
    from dflash_guard.scan.runner import scan_paths

__all__ = ["ScanReport", "scan_paths"]


def __getattr__(name: str) -> object:
    """`scan_paths`, imported on first use (PEP 562)."""
    if name == "scan_paths":
        from dflash_guard.scan.runner import scan_paths

        return scan_paths
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
