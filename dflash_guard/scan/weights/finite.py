"""Every float of a safetensors file read and held to be finite: a drafter of NaN weights passes
every header check, loads in every engine, and accepts nothing; a target with NaN rows decodes
alike with and without the drafter, so the lossless diff cannot see them (`finite_findings`
reports both, under the rule each caller names).

The bytes are read with bounded `pread`s, a window at a time, never memory-mapped (a file
truncated while it is read is an `OSError`, not a SIGBUS), and judged by torch's `isfinite` in
the tensor's own dtype. Integer and boolean tensors have no non-finite value; the sub-byte float
formats (F4, F6_*) and F8_E8M0, which torch cannot view, are reported as unchecked rather than
passed.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard.findings import Finding
from dflash_guard.rules import Rule
from dflash_guard.scan.weights.safetensors import DTYPE_BITS, Header
from dflash_guard.severity import Severity

if TYPE_CHECKING:
    import torch

WINDOW = 64 << 20  # bytes read and judged at a time
# safetensors dtype -> torch's name for it (torch is imported only when a drafter is read: a scan
# of other folders stays free of it)
FLOAT_DTYPES = {
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "C64": "complex64",
}
_NEVER_NONFINITE = {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64"}


def nonfinite_tensors(path: Path, header: Header) -> tuple[list[str], list[str]]:
    """Names of the tensors of `path` holding a NaN or an infinity, and of those whose dtype
    cannot be checked; `OSError` when the file cannot be read to its end."""
    import torch

    bad: list[str] = []
    unchecked: list[str] = []
    descriptor = os.open(path, os.O_RDONLY)
    try:
        for name, entry in sorted(header.tensors.items(), key=lambda t: t[1]["data_offsets"][0]):
            dtype = entry["dtype"]
            if dtype in _NEVER_NONFINITE:
                continue
            if dtype not in FLOAT_DTYPES:
                unchecked.append(name)
                continue
            start, end = (header.data_start + offset for offset in entry["data_offsets"])
            torch_dtype = getattr(torch, FLOAT_DTYPES[dtype])
            if not _finite(descriptor, start, end, torch_dtype, DTYPE_BITS[dtype] // 8):
                bad.append(name)
    finally:
        os.close(descriptor)
    return bad, unchecked


def finite_findings(weights: list[tuple[Path, str, Header]], rule: Rule, detector: str,
                    consequence: str) -> list[Finding]:
    """Each complete safetensors file (path, display, header) read in full: a tensor with NaN
    or infinity (high: `consequence` says what it does), one whose float format cannot be
    checked (medium), or a file unreadable to its end (high) is a finding of `rule` on it."""
    findings = []
    for path, display, header in weights:
        def finding(severity: Severity, message: str, shown: str = display) -> Finding:
            return Finding(rule.id, severity, shown, message, detector=detector)

        try:
            bad, unchecked = nonfinite_tensors(path, header)
        except OSError as error:
            findings.append(finding(Severity.high, f"cannot read the weights to their end: "
                                                   f"{error}"))
            continue
        if bad:
            findings.append(finding(Severity.high, f"{len(bad)} tensor(s) hold NaN or infinity "
                                                   f"(first: {bad[0]}): {consequence}"))
        if unchecked:
            findings.append(finding(Severity.medium, f"{len(unchecked)} tensor(s) in a float "
                                                     f"format torch cannot read (first: "
                                                     f"{unchecked[0]}): not checked for NaN"))
    return findings


def _finite(descriptor: int, start: int, end: int, dtype: torch.dtype, width: int) -> bool:
    """Whether the values of `dtype` in bytes [start, end) are all finite. One window buffer is
    reused; `x * 0` summed is NaN exactly when some x is an infinity or a NaN (finite values
    give zeros), which costs a third of `isfinite(x).all()` (benchmarks/bench_finite.py)."""
    import torch

    step = WINDOW - WINDOW % width
    window = bytearray(min(step, end - start))
    for offset in range(start, end, step):
        length = min(step, end - offset)
        read = os.preadv(descriptor, [memoryview(window)[:length]], offset)
        if read != length:
            raise OSError(f"file ends at byte {offset + read}, inside a tensor")
        values = torch.frombuffer(window, dtype=dtype, count=length // width)
        if values.element_size() == 1:  # float8: arithmetic is defined on wider floats
            values = values.float()
        elif values.is_complex():
            values = torch.view_as_real(values)
        if not bool(values.mul(0).sum().isfinite()):
            return False
    return True


def float_bytes(header: Header) -> int:
    """Bytes of floating-point tensor data in `header` (what `nonfinite_tensors` reads)."""
    return sum(math.prod(entry["shape"]) * DTYPE_BITS[entry["dtype"]] // 8
               for entry in header.tensors.values() if entry["dtype"] in FLOAT_DTYPES)
