"""Benchmark `lock` and cached `verify` of a model folder of many small files (issue 15, Scale).

Writes N small files (default 100,000, in 100 subfolders) into a temporary folder and times, in
rotated rounds so machine load hits every contender alike:
  - `sha256sum` over the same files (the C baseline: `xargs sha256sum`, sequential),
  - `yaml.safe_load` of the lockfile (pure-Python PyYAML: what reading cost before),
  - `yaml.load(..., CSafeLoader)` of the lockfile (libyaml: the floor for reading it),
  - dflash-guard lock: `build_lock` + `write_lockfile` (every file hashed, stat cache written),
  - dflash-guard cached verify: `load_lockfile` + `verify_lock` (the stat cache answers).
Prints seconds (best of --repeat) and ratios against the baselines measured in the same run,
so a busy machine shows as slower baselines too. Goal: lock and cached verify of 100k files
each under 10 s on an idle 2-core machine.

    python benchmarks/bench_lock_scale.py [--files 100000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.pins.lockfile import load_lockfile, write_lockfile  # noqa: E402
from dflash_guard.pins.resolve import build_lock  # noqa: E402
from dflash_guard.pins.verify import verify_lock  # noqa: E402


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _write_files(folder: Path, count: int) -> None:
    for i in range(count):
        sub = folder / f"shard-{i % 100:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"piece-{i:06d}.json").write_bytes(b'{"i": %d, "pad": "%s"}\n' % (i, b"x" * 64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-lock-scale-"))
    os.environ["DFLASH_GUARD_CACHE_DIR"] = str(work / "cache")
    try:
        model = work / "model"
        model.mkdir()
        _write_files(model, args.files)
        lock_path = work / "dflash.lock"
        print(f"{args.files:,} files, {os.cpu_count()} CPUs, best of {args.repeat}")

        def sha256sum() -> None:
            files = subprocess.run(["find", str(model), "-type", "f", "-print0"], check=True,
                                   capture_output=True).stdout
            subprocess.run(["xargs", "-0", "sha256sum"], input=files, check=True,
                           capture_output=True)

        def lock() -> None:
            result = build_lock({"target": str(model)})
            assert result.lock is not None, result.outcome.reason
            write_lockfile(result.lock, lock_path)

        def cached_verify() -> None:
            report = verify_lock(load_lockfile(lock_path), {"target": model})
            assert report.ok and report.bytes_hashed == 0, report.problems[:3]

        lock()  # the lockfile the readers parse, and a filled stat cache
        text = lock_path.read_text()
        print(f"lockfile: {len(text) / 1e6:.1f} MB")
        contenders: dict[str, Callable[[], object]] = {
            "sha256sum": sha256sum,
            "yaml.safe_load": lambda: yaml.safe_load(text),
            "yaml CSafeLoader": lambda: yaml.load(text, Loader=yaml.CSafeLoader),
            "lock": lock,
            "cached verify": cached_verify,
        }
        results: dict[str, float] = {}
        names = list(contenders)
        for round_ in range(args.repeat):
            for name in names[round_ % len(names):] + names[: round_ % len(names)]:
                seconds = _seconds(contenders[name])
                results[name] = min(seconds, results.get(name, seconds))

        for name, seconds in results.items():
            print(f"{name:18} {seconds:8.2f} s")
        for ours in ("lock", "cached verify"):
            ratios = ", ".join(f"{results[ours] / results[base]:.2f}x {base}"
                               for base in ("sha256sum", "yaml.safe_load", "yaml CSafeLoader"))
            print(f"{ours}: {ratios}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
