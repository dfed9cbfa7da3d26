"""Benchmark `scan_paths` against `modelscan -p` on the same folder, in the same run.

The folder holds one big safetensors file (written sparsely: a header, then a hole up to the
size its tensor needs, since the scan reads only the header) and a torch `.bin` state dict.
Prints medians and ratios; no thresholds are asserted here.

It also compares start-up: `dflash-guard scan` and `modelscan -p` as processes on the same small
folder (a safetensors file and a config.json), best of N runs each, interleaved in one run.

    python benchmarks/bench_scan.py                  # 512 MiB safetensors, then start-up
    python benchmarks/bench_scan.py --big            # 4 GiB safetensors
    python benchmarks/bench_scan.py --startup-only   # only the process comparison
    python benchmarks/bench_scan.py --startup-only --root /path/to/other/checkout  # before/after
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dflash_guard.scan import scan_paths  # noqa: E402
from dflash_guard.scan.weights.safetensors import check_safetensors  # noqa: E402


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


def compare_startup(root: Path, modelscan: str, repeat: int) -> None:
    """`dflash-guard scan` (from the checkout `root`) vs `modelscan -p` on one small folder.

    Each is run `repeat` times, interleaved so a busy machine slows both alike; the best run of
    each is compared (start-up noise only ever adds time).
    """
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder)
        write_sparse_safetensors(model / "model.safetensors", 1 << 20)
        (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
        ours_cmd = [sys.executable, "-m", "dflash_guard", "scan", str(model)]
        theirs_cmd = [modelscan, "-p", str(model)]
        env = {**os.environ, "PYTHONPATH": str(root)}
        for command in (ours_cmd, theirs_cmd):  # warm the file cache, check both run
            subprocess.run(command, capture_output=True, check=False, cwd=root, env=env)
        ours, theirs = [], []
        for _ in range(repeat):
            ours.append(_timed(ours_cmd, root, env))
            theirs.append(_timed(theirs_cmd, root, env))
    ours_wall, ours_cpu = (min(run[i] for run in ours) for i in (0, 1))
    theirs_wall, theirs_cpu = (min(run[i] for run in theirs) for i in (0, 1))
    print(f"start-up, small folder, best of {repeat} (dflash-guard from {root}):")
    for name, wall, cpu in (
        ("dflash-guard scan, process     ", ours_wall, ours_cpu),
        ("modelscan -p, process          ", theirs_wall, theirs_cpu),
    ):
        print(f"{name} : {wall * 1e3:8.1f} ms wall {cpu * 1e3:8.1f} ms CPU")
    print(
        f"ratio dflash-guard / modelscan  : {ours_wall / theirs_wall:8.2f}x wall "
        f"{ours_cpu / theirs_cpu:8.2f}x CPU (goal <= 1.00)"
    )


def _timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `command`, start-up included.

    CPU time (user + system of the child) is what a busy, shared machine distorts least.
    """
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, check=False, cwd=cwd, env=env)
    wall = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512, help="safetensors size (MiB)")
    parser.add_argument("--big", action="store_true", help="4 GiB safetensors file")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--startup-repeat", type=int, default=15, help="process runs (best of)")
    parser.add_argument("--startup-only", action="store_true", help="only the start-up part")
    parser.add_argument("--root", type=Path, default=REPO, help="checkout whose CLI to time")
    args = parser.parse_args()
    size = (4 << 30) if args.big else args.size_mib << 20
    modelscan = shutil.which("modelscan") or str(Path(sys.executable).with_name("modelscan"))
    if args.startup_only:
        compare_startup(args.root.resolve(), modelscan, args.startup_repeat)
        return

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
    print()
    compare_startup(args.root.resolve(), modelscan, args.startup_repeat)


if __name__ == "__main__":
    main()
