"""Benchmark `scan_paths` against `modelscan -p` on the same folder, in the same run.

The folder holds one big safetensors file (written sparsely: a header, then a hole up to the
size its tensor needs, since the scan reads only the header) and a torch `.bin` state dict.
Prints medians and ratios; no thresholds are asserted here.

    python benchmarks/bench_scan.py            # 512 MiB safetensors
    python benchmarks/bench_scan.py --big      # 4 GiB safetensors
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.scan import scan_paths  # noqa: E402
from dflash_guard.scan.safetensors_check import check_safetensors  # noqa: E402


def write_sparse_safetensors(path: Path, size_bytes: int) -> None:
    """One BF16 tensor filling `size_bytes` of data, without writing the data."""
    columns = 4096
    rows = size_bytes // (2 * columns)
    span = rows * columns * 2
    header = json.dumps(
        {
            "model.embed.weight": {
                "dtype": "BF16",
                "shape": [rows, columns],
                "data_offsets": [0, span],
            }
        }
    ).encode()
    header += b" " * (-len(header) % 8)
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + span)


def write_torch_bin(path: Path) -> None:
    import torch

    torch.manual_seed(0)
    state = {f"layers.{i}.weight": torch.randn(256, 256) for i in range(8)}
    torch.save(state, path)


def median_seconds(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512, help="safetensors size (MiB)")
    parser.add_argument("--big", action="store_true", help="4 GiB safetensors file")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    size = (4 << 30) if args.big else args.size_mib << 20
    modelscan = shutil.which("modelscan") or str(Path(sys.executable).with_name("modelscan"))

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        st_path = root / "model.safetensors"
        write_sparse_safetensors(st_path, size)
        write_torch_bin(root / "pytorch_model.bin")
        scan_paths([root])  # warm imports (modelscan, numpy, jinja2) once

        st_time = median_seconds(
            lambda: check_safetensors(st_path, "model.safetensors"), args.repeat
        )
        ours = median_seconds(lambda: scan_paths([root]), args.repeat)
        ours_cli = median_seconds(
            lambda: subprocess.run(
                [sys.executable, "-m", "dflash_guard", "scan", str(root)],
                capture_output=True,
                check=False,
                cwd=Path(__file__).resolve().parents[1],
            ),
            args.repeat,
        )
        theirs = median_seconds(
            lambda: subprocess.run([modelscan, "-p", str(root)], capture_output=True, check=False),
            args.repeat,
        )

    print(f"safetensors file: {size / (1 << 30):.2f} GiB (sparse) + torch .bin (8x256x256 f32)")
    print(f"safetensors header check        : {st_time * 1e3:8.2f} ms (target < 50 ms)")
    print(f"scan_paths(folder), in process  : {ours * 1e3:8.2f} ms")
    print(f"dflash-guard scan, subprocess   : {ours_cli * 1e3:8.2f} ms")
    print(f"modelscan -p folder, subprocess : {theirs * 1e3:8.2f} ms")
    print(f"ratio modelscan / scan_paths    : {theirs / ours:8.2f}x")
    print(f"ratio modelscan / CLI           : {theirs / ours_cli:8.2f}x")


if __name__ == "__main__":
    main()
