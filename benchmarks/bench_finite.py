"""The drafter's finiteness check (`DG-DRAFTER-WEIGHTS`, issue 46) against a plain read.

One safetensors file of random weights (--mib MiB per dtype, bf16 and f32 tensors of a drafter's
shapes) is written to a temporary folder and read once to warm the page cache; then, in rotated
rounds, best of --repeat each:

- plain: the same bytes read with the same `pread` windows and thrown away (the floor: what any
  reader of the file pays);
- finite: `scan.weights.finite.nonfinite_tensors`, which reads the same windows and judges each
  with torch's `isfinite`.

Prints GB/s of each and the ratio finite/plain (1.0 is free; the check's cost beyond reading
the file is the ratio's inverse). Both read from the page cache, so the ratio is the judging's
cost, not the disk's: on a cold disk the read dominates and the ratio moves toward 1.

    python benchmarks/bench_finite.py [--mib 512] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.scan.weights.finite import WINDOW, float_bytes, nonfinite_tensors  # noqa: E402
from dflash_guard.scan.weights.safetensors import check_safetensors  # noqa: E402


def write_weights(folder: Path, mib: int) -> Path:
    """A safetensors file of `mib` MiB of bf16 and `mib` MiB of f32 weights, [1024, N] each."""
    import torch
    from safetensors.torch import save_file

    columns = mib * (1 << 20) // (1024 * 4)  # one f32 tensor of `mib` MiB
    generator = torch.Generator().manual_seed(0)
    tensors = {
        "layers.0.mlp.up_proj.weight": torch.randn(1024, columns, generator=generator),
        "layers.0.mlp.down_proj.weight": torch.randn(
            1024, 2 * columns, generator=generator).to(torch.bfloat16),
    }
    path = folder / "model.safetensors"
    save_file(tensors, str(path))
    return path


def plain_read(path: Path) -> None:
    """Every byte of `path` read into one reused `WINDOW` buffer, as the check reads them."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(descriptor).st_size
        window = bytearray(min(WINDOW, size))
        for offset in range(0, size, WINDOW):
            os.preadv(descriptor, [memoryview(window)[:min(WINDOW, size - offset)]], offset)
    finally:
        os.close(descriptor)


def best(runs: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """The fastest wall time of each run, in rotated rounds."""
    found: dict[str, float] = {}
    names = list(runs)
    for round_ in range(repeat):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            began = time.perf_counter()
            runs[name]()
            found[name] = min(found.get(name, float("inf")), time.perf_counter() - began)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512, help="MiB of each dtype's weights")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = write_weights(Path(folder), args.mib)
        findings, header = check_safetensors(path, path.name)
        if header is None:
            raise SystemExit(f"the written file does not parse: {findings}")
        plain_read(path)  # warm the page cache for both
        bad, unchecked = nonfinite_tensors(path, header)
        if bad or unchecked:
            raise SystemExit(f"random weights judged non-finite: {bad} {unchecked}")
        times = best({"plain": lambda: plain_read(path),
                      "finite": lambda: nonfinite_tensors(path, header)}, args.repeat)
        size = path.stat().st_size
    print(f"file: {size / 1e9:.2f} GB ({float_bytes(header) / 1e9:.2f} GB of floats), "
          f"best of {args.repeat}, page cache warm")
    for name, seconds in times.items():
        print(f"  {name:7s} {seconds:7.3f} s  {size / seconds / 1e9:6.2f} GB/s")
    print(f"finite/plain time: {times['finite'] / times['plain']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
