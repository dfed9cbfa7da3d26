"""Benchmark `verify`: cold (full hashing) and warm (stat cache) against baselines in one run.

Writes N files of random bytes into a temporary folder, locks them, and times:
  - `sha256sum` over the same files (one process, sequential: the classic baseline),
  - model_signing's file hashing (`model_signing.hashing.Config().hash`), if installed,
  - dflash-guard verify, cold (empty stat cache, after a first read so the page cache is warm
    for every contender alike),
  - dflash-guard verify, warm (the stat cache answers).
Prints seconds and ratios against each baseline. Default 2 x 256 MiB; `--size-mib 1024` for the
2 x 1 GiB target run.

    python benchmarks/bench_verify.py [--files 2] [--size-mib 256] [--repeat 3]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.pins.lockfile import Artifact, LockedFile, Lockfile  # noqa: E402
from dflash_guard.pins.verify import verify_lock  # noqa: E402


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _write_files(folder: Path, count: int, size: int) -> list[Path]:
    paths = []
    block = 16 * 1024 * 1024
    for i in range(count):
        path = folder / f"model-{i:05d}-of-{count:05d}.safetensors"
        with open(path, "wb") as handle:
            left = size
            while left:
                n = min(block, left)
                handle.write(os.urandom(n))
                left -= n
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    os.environ["DFLASH_GUARD_CACHE_DIR"] = str(work / "cache")
    try:
        model = work / "model"
        model.mkdir()
        paths = _write_files(model, args.files, args.size_mib * 1024 * 1024)
        total_gib = args.files * args.size_mib / 1024
        print(f"{args.files} files x {args.size_mib} MiB = {total_gib:.2f} GiB, "
              f"{os.cpu_count()} CPUs, best of {args.repeat}")

        # sha256sum: one process, files in sequence. Also gives the digests for the lock.
        out = subprocess.run(["sha256sum", *map(str, paths)], check=True, capture_output=True,
                             text=True).stdout
        digests = {Path(line.split()[1]).name: line.split()[0] for line in out.splitlines()}
        lock = Lockfile(artifacts=(Artifact("target", "local", None, None, None, tuple(
            LockedFile(p.name, p.stat().st_size, digests[p.name]) for p in paths), name="m"),))
        roots = {"target": model}

        def sha256sum() -> None:
            subprocess.run(["sha256sum", *map(str, paths)], check=True, capture_output=True)

        def cold() -> None:
            report = verify_lock(lock, roots, use_cache=False)
            assert report.passed, report.problems

        def warm() -> None:
            report = verify_lock(lock, roots)
            assert report.passed and report.bytes_hashed == 0, report.to_json()

        contenders: dict[str, Callable[[], object]] = {"sha256sum": sha256sum}
        try:
            from model_signing import hashing as ms_hashing

            contenders["model_signing"] = lambda: ms_hashing.Config().hash(model)
        except ImportError:
            print("model_signing not installed: skipping that baseline")
        contenders["verify cold"] = cold
        verify_lock(lock, roots)  # fill the stat cache
        contenders["verify warm"] = warm

        # Rounds run every contender, in a rotated order, so load and caching hit all alike.
        results: dict[str, float] = {}
        names = list(contenders)
        for round_ in range(args.repeat):
            for name in names[round_ % len(names):] + names[: round_ % len(names)]:
                seconds = _seconds(contenders[name])
                results[name] = min(seconds, results.get(name, seconds))

        for name, seconds in results.items():
            rate = total_gib * 1024 / seconds
            print(f"{name:14} {seconds * 1000:10.1f} ms  {rate:10.0f} MiB/s")
        for base in ("sha256sum", "model_signing"):
            if base in results:
                print(f"cold verify is {results[base] / results['verify cold']:.2f}x "
                      f"faster than {base}; warm re-verify "
                      f"{results[base] / results['verify warm']:.0f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
