"""`dflash-guard scan`: never load what has not been scanned.

One module per detector (`pickles`, `safetensors_check`, `gguf_check`, `templates` and its
jinja2 check `template_check`, `remote_code`, `drafter_config`), the rules from
`dflash_guard.rules`, the shared types in `interface`, the walk in `runner` and the report in
`report` (rendered by `dflash_guard.formats`). Helpers: `regular` (never opening a FIFO or device),
`pickle_stream` (the opcode walk), `pickle_globals` (allowlists), `modelscan_pass`,
`containers` (zip, tar and compressed streams), `payloads` (serialized objects hidden in
strings), `sniff`, `jsonfile`; GGUF headers are read by `kernels_ref.gguf_reader`, the one
bounded GGUF reader.
Heavy libraries (modelscan, jinja2, gguf, numpy) load only when a file needs them.
"""

from dflash_guard.scan.interface import Detector, Finding, RemoteCodeFile, Severity
from dflash_guard.scan.report import ScanReport
from dflash_guard.scan.runner import scan_paths

__all__ = ["Detector", "Finding", "RemoteCodeFile", "ScanReport", "Severity", "scan_paths"]
