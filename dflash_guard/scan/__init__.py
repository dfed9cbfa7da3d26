"""`dflash-guard scan`: never load what has not been scanned.

One module per detector (`pickles`, `safetensors_check`, `gguf_check`, `templates`,
`remote_code`, `drafter_config`), the shared types in `interface`, the walk in `runner`, the
report in `report` and its SARIF form in `sarif`.
"""

from dflash_guard.scan.interface import Detector, Finding, RemoteCodeFile, Severity
from dflash_guard.scan.report import ScanReport
from dflash_guard.scan.runner import scan_paths

__all__ = ["Detector", "Finding", "RemoteCodeFile", "ScanReport", "Severity", "scan_paths"]
