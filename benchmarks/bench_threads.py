"""Benchmark the thread policy: the auto choice against one thread and against N threads.

Times the local difftest (`run_difftest`) of a pair with `threads=None` (the policy's choice),
`threads=1` and `threads=N` (N = the usable cores), in rotated rounds after one untimed run,
twice: with no neighbour of its own, then with a CPU-bound neighbour process it starts itself (a
busy loop that ends by itself after --neighbour-limit seconds and is killed at the end). Pairs:
the built-in trained pair (tiny: the policy picks one thread) and, unless --no-medium, a
random-weight pair of 47M parameters (the policy picks the free cores). Prints seconds (best of
--repeat rounds, more for a short run), the policy's choice, and the ratios auto/1 thread,
auto/N threads and auto/best of the two; goal (issue 27): auto/best at most 1.10 in every row.
The load average and the cores other work keeps busy now (the policy's own sample) are printed
before and after: other processes count as load too.

    python benchmarks/bench_threads.py [--repeat 2] [--max-new-tokens 16] [--no-medium]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.lossless.local import run_difftest  # noqa: E402
from dflash_guard.lossless.options import LocalOptions  # noqa: E402
from kernels_ref.fixtures import make_fixture_pair  # noqa: E402
from kernels_ref.threads import busy_cores, usable_cores  # noqa: E402
from tests.support.kernels import random_pair  # noqa: E402

PROMPTS = ["def mean(data):\n    ", "The capital of France is", "1, 2, 3, 4,"]
MIN_SECONDS = 3.0
BUSY = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


@contextmanager
def neighbour(active: bool, limit: float) -> Iterator[None]:
    """A CPU-bound process beside the benchmark while active (bounded, killed at the end)."""
    if not active:
        yield
        return
    process = subprocess.Popen([sys.executable, "-c", BUSY.format(limit=limit)])
    try:
        yield
    finally:
        process.kill()
        process.wait()


def best_seconds(options: LocalOptions, settings: list[int | None],
                 repeat: int) -> list[tuple[float, str]]:
    """Best wall seconds of each thread setting, and the choice its report names. One untimed
    run first (lazy initialisation, and its length), then rounds in rotated order, so that no
    setting always runs first: `repeat` rounds, or more for a short run (each setting timed for
    at least MIN_SECONDS, so that a clock tick is not 10% of the best)."""
    began = time.perf_counter()
    run_difftest(replace(options, threads=1))
    rounds = max(repeat, math.ceil(MIN_SECONDS / (time.perf_counter() - began)))
    best = [float("inf")] * len(settings)
    reasons = [""] * len(settings)
    for round_ in range(rounds):
        for step in range(len(settings)):
            index = (round_ + step) % len(settings)
            began = time.perf_counter()
            report = run_difftest(replace(options, threads=settings[index]))
            best[index] = min(best[index], time.perf_counter() - began)
            assert report.identical and report.threads is not None
            reasons[index] = f"{report.threads.threads} ({report.threads.reason})"
    return list(zip(best, reasons, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--no-medium", action="store_true", help="only the built-in tiny pair")
    parser.add_argument("--neighbour-limit", type=float, default=900.0,
                        help="seconds after which the neighbour ends by itself")
    args = parser.parse_args()
    cores = usable_cores()
    print(f"{cores} usable cores, best of {args.repeat}, {busy_cores():.2f} busy now, load "
          "average " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n"
                                   for i, p in enumerate(PROMPTS)))
        pairs = {"tiny (built-in)": make_fixture_pair(Path(tmp) / "tiny")}
        if not args.no_medium:
            pairs["medium (random)"] = random_pair(Path(tmp) / "medium", 0, hidden=1024,
                                                   target_layers=6)
        rows = []
        for name, (target, drafter) in pairs.items():
            options = LocalOptions(target, drafter, prompts=prompts,
                                   max_new_tokens=args.max_new_tokens)
            for loaded in (False, True):
                with neighbour(loaded, args.neighbour_limit):
                    (auto, why), (one, _), (many, _) = best_seconds(
                        options, [None, 1, cores], args.repeat)
                condition = "with a CPU-bound neighbour" if loaded else "no neighbour"
                ratio = auto / min(one, many)
                rows.append(ratio)
                print(f"{name:16} {condition:27} auto {auto:6.2f} s = {why}; 1 thread "
                      f"{one:6.2f} s; {cores} threads {many:6.2f} s; auto/1 {auto / one:.2f}x, "
                      f"auto/{cores} {auto / many:.2f}x, auto/best {ratio:.2f}x (goal <= 1.10)",
                      flush=True)
    print(f"worst auto/best: {max(rows):.2f}x; after: {busy_cores():.2f} busy now, load average "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
