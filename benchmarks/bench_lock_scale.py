"""Benchmark `lock` and cached `verify` of a model folder of many small files (issues 15, 27, 37).

Writes N small files (default 100,000, in 100 subfolders) as the target and 5 as the drafter
into a temporary folder and times, in rotated rounds so machine load hits every contender alike:
  - `sha256sum` over the same files (the C baseline: `find | xargs sha256sum`, sequential),
  - `dflash-guard lock` as a process, with an empty stat cache (every file hashed),
  - `dflash-guard verify` as a process, cached (the stat cache the lock wrote answers),
  - `dflash-guard verify` of a one-file lock as a process (the fixed cost: the interpreter,
    the CLI's imports and the option parsing every command pays),
and, in this process, the parts: `load_lockfile`, `build_lock` + `write_lockfile` (empty stat
cache), `load_lockfile` + `verify_lock` (cached), and `yaml.load(..., CSafeLoader)` of the
lockfile (libyaml building every value); with --pure-yaml, `yaml.safe_load` too (minutes on a
version 2 lock). Prints wall seconds and CPU seconds (user + system, this process and its
children: what a busy machine does not inflate), each the best of --repeat, and the goal
ratios of the two processes against `sha256sum` measured in the same run. Goal (issues 27, 37):
lock and cached verify each within 2x `sha256sum`. `--lockfile-version 2` writes the version 2
lockfile (a YAML node per field) in this process, the before.

    python benchmarks/bench_lock_scale.py [--files 100000] [--repeat 3] [--lockfile-version 2]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dflash_guard.pins.lockfile import (  # noqa: E402
    LOCKFILE_VERSION,
    load_lockfile,
    write_lockfile,
)
from dflash_guard.pins.resolve import build_lock  # noqa: E402
from dflash_guard.pins.verify import verify_lock  # noqa: E402

CLI = [sys.executable, "-m", "dflash_guard"]


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


def _run(*args: str) -> None:
    """Run the CLI (this tree's) as a child process; anything but exit 0 stops the benchmark."""
    child = subprocess.run([*CLI, *args, "--quiet"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(args[:1])} exited {child.returncode}: "
                         f"{(child.stderr or child.stdout)[-500:]}")


@dataclasses.dataclass
class Contender:
    """What is timed (`run`), after an untimed `setup`."""

    run: Callable[[], object]
    setup: Callable[[], object] = lambda: None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lockfile-version", type=int, default=LOCKFILE_VERSION)
    parser.add_argument("--pure-yaml", action="store_true", help="time yaml.safe_load too")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-lock-scale-"))
    # the stat cache and its key are the benchmark's own, never the user's
    os.environ["DFLASH_GUARD_CACHE_DIR"] = str(work / "cache")
    os.environ["DFLASH_GUARD_STATE_DIR"] = str(work / "state")
    stat_cache = work / "cache" / "statcache.json"
    try:
        model, drafter, tiny = work / "model", work / "drafter", work / "tiny"
        for folder in (model, drafter, tiny):
            folder.mkdir()
        _write_files(model, args.files)
        for i in range(5):
            (drafter / f"part-{i}.json").write_text(f'{{"drafter": {i}}}\n')
        (tiny / "config.json").write_text("{}\n")
        lock_path, cli_lock, tiny_lock = (work / name for name in ("dflash.lock", "cli.lock",
                                                                   "tiny.lock"))
        print(f"{args.files:,} files, {len(os.sched_getaffinity(0))} CPUs, best of "
              f"{args.repeat}, lockfile_version {args.lockfile_version}, load average "
              + " ".join(f"{x:.1f}" for x in os.getloadavg()))

        def sha256sum() -> None:
            files = subprocess.run(["find", str(model), str(drafter), "-type", "f", "-print0"],
                                   check=True, capture_output=True).stdout
            subprocess.run(["xargs", "-0", "sha256sum"], input=files, check=True,
                           capture_output=True)

        def cold() -> None:  # an empty stat cache: the lock hashes every file
            stat_cache.unlink(missing_ok=True)

        def lock_process() -> None:
            _run("lock", "--target", str(model), "--drafter", str(drafter), "-o", str(cli_lock))

        def verify_process() -> None:
            _run("verify", "--lock", str(cli_lock), f"--root=target={model}",
                 f"--root=drafter={drafter}")

        def fixed_cost() -> None:
            _run("verify", "--lock", str(tiny_lock), f"--root=target={tiny}",
                 f"--root=drafter={tiny}")

        def lock() -> None:
            result = build_lock({"target": str(model), "drafter": str(drafter)})
            assert result.lock is not None, result.outcome.reason
            write_lockfile(dataclasses.replace(result.lock,
                                               lockfile_version=args.lockfile_version), lock_path)

        def cached_verify() -> None:
            report = verify_lock(load_lockfile(lock_path), {"target": model, "drafter": drafter})
            assert report.passed and report.bytes_hashed == 0, report.problems[:3]

        _run("lock", "--target", str(tiny), "--drafter", str(tiny), "-o", str(tiny_lock))
        lock_process()
        lock()  # the lockfile the readers parse; the stat cache both verifies read
        text = lock_path.read_text()
        print(f"lockfile: {len(text) / 1e6:.1f} MB")
        contenders = {
            "sha256sum": Contender(sha256sum),
            "lock (process)": Contender(lock_process, cold),
            "verify (process)": Contender(verify_process),
            "fixed cost": Contender(fixed_cost),
            "yaml CSafeLoader": Contender(lambda: yaml.load(text, Loader=yaml.CSafeLoader)),
            "load_lockfile": Contender(lambda: load_lockfile(lock_path)),
            "build_lock": Contender(lock, cold),
            "verify_lock": Contender(cached_verify),
        }
        if args.pure_yaml:
            contenders["yaml.safe_load"] = Contender(lambda: yaml.safe_load(text))
        wall: dict[str, float] = {}
        cpu: dict[str, float] = {}
        names = list(contenders)
        for round_ in range(args.repeat):
            for name in names[round_ % len(names):] + names[: round_ % len(names)]:
                contenders[name].setup()
                w, c = _seconds(contenders[name].run)
                wall[name], cpu[name] = min(w, wall.get(name, w)), min(c, cpu.get(name, c))

        for name in names:
            print(f"{name:18} {wall[name]:8.2f} s wall {cpu[name]:8.2f} s cpu")
        for ours in ("lock (process)", "verify (process)"):
            print(f"{ours.split()[0]} / sha256sum: {wall[ours] / wall['sha256sum']:.2f}x wall, "
                  f"{cpu[ours] / cpu['sha256sum']:.2f}x cpu (goal: 2x)")
        print("load average after: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
