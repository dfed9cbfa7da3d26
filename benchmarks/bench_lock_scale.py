"""Benchmark `lock` and cached `verify` of a model folder of many small files (issues 15, 27).

Writes N small files (default 100,000, in 100 subfolders) into a temporary folder and times, in
rotated rounds so machine load hits every contender alike:
  - `sha256sum` over the same files (the C baseline: `xargs sha256sum`, sequential),
  - `yaml.load(..., CSafeLoader)` of the lockfile (libyaml building every value),
  - `load_lockfile` alone (reading and checking the lockfile),
  - dflash-guard lock: `build_lock` + `write_lockfile` (every file hashed, stat cache written),
  - dflash-guard cached verify: `load_lockfile` + `verify_lock` (the stat cache answers),
  - with --pure-yaml, `yaml.safe_load` (pure-Python PyYAML; minutes on a version 2 lock).
Prints wall seconds and CPU seconds (user + system, this process and its children: what a busy
machine does not inflate), each the best of --repeat, and the goal ratios against `sha256sum`
measured in the same run. Goal (issue 27): lock and cached verify each within 2x `sha256sum`.
`--lockfile-version 2` writes the version 2 lockfile (a YAML node per field), the before.

    python benchmarks/bench_lock_scale.py [--files 100000] [--repeat 2] [--lockfile-version 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.pins.lockfile import (  # noqa: E402
    LOCKFILE_VERSION,
    load_lockfile,
    write_lockfile,
)
from dflash_guard.pins.resolve import build_lock  # noqa: E402
from dflash_guard.pins.verify import verify_lock  # noqa: E402


def _cpu() -> float:
    """User + system CPU seconds of this process and its waited-for children so far."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _seconds(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, cpu) seconds of one call."""
    wall, cpu = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - wall, _cpu() - cpu


def _write_files(folder: Path, count: int) -> None:
    for i in range(count):
        sub = folder / f"shard-{i % 100:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"piece-{i:06d}.json").write_bytes(b'{"i": %d, "pad": "%s"}\n' % (i, b"x" * 64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--lockfile-version", type=int, default=LOCKFILE_VERSION)
    parser.add_argument("--pure-yaml", action="store_true", help="time yaml.safe_load too")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-lock-scale-"))
    os.environ["DFLASH_GUARD_CACHE_DIR"] = str(work / "cache")
    try:
        model = work / "model"
        model.mkdir()
        _write_files(model, args.files)
        lock_path = work / "dflash.lock"
        print(f"{args.files:,} files, {len(os.sched_getaffinity(0))} CPUs, best of "
              f"{args.repeat}, lockfile_version {args.lockfile_version}, load average "
              + " ".join(f"{x:.1f}" for x in os.getloadavg()))

        def sha256sum() -> None:
            files = subprocess.run(["find", str(model), "-type", "f", "-print0"], check=True,
                                   capture_output=True).stdout
            subprocess.run(["xargs", "-0", "sha256sum"], input=files, check=True,
                           capture_output=True)

        def lock() -> None:
            result = build_lock({"target": str(model)})
            assert result.lock is not None, result.outcome.reason
            write_lockfile(dataclasses.replace(result.lock,
                                               lockfile_version=args.lockfile_version), lock_path)

        def cached_verify() -> None:
            report = verify_lock(load_lockfile(lock_path), {"target": model})
            assert report.passed and report.bytes_hashed == 0, report.problems[:3]

        lock()  # the lockfile the readers parse, and a filled stat cache
        text = lock_path.read_text()
        print(f"lockfile: {len(text) / 1e6:.1f} MB")
        contenders: dict[str, Callable[[], object]] = {
            "sha256sum": sha256sum,
            "yaml CSafeLoader": lambda: yaml.load(text, Loader=yaml.CSafeLoader),
            "load_lockfile": lambda: load_lockfile(lock_path),
            "lock": lock,
            "cached verify": cached_verify,
        }
        if args.pure_yaml:
            contenders["yaml.safe_load"] = lambda: yaml.safe_load(text)
        wall: dict[str, float] = {}
        cpu: dict[str, float] = {}
        names = list(contenders)
        for round_ in range(args.repeat):
            for name in names[round_ % len(names):] + names[: round_ % len(names)]:
                w, c = _seconds(contenders[name])
                wall[name], cpu[name] = min(w, wall.get(name, w)), min(c, cpu.get(name, c))

        for name in names:
            print(f"{name:18} {wall[name]:8.2f} s wall {cpu[name]:8.2f} s cpu")
        for ours in ("lock", "cached verify"):
            print(f"{ours} / sha256sum: {wall[ours] / wall['sha256sum']:.2f}x wall, "
                  f"{cpu[ours] / cpu['sha256sum']:.2f}x cpu (goal: 2x)")
        print("load average after: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
