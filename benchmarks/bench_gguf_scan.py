"""Benchmark GGUF reading where users wait, as whole processes: seconds and peak memory.

In one run, best of --repeat each, in rotated rounds:

- the real Qwen3 vocabulary GGUF of the pinned llama.cpp tree (`models/ggml-vocab-qwen2.gguf`,
  151,936 tokens and 151,387 merges: the header every Qwen GGUF carries): `dflash-guard scan`
  against gguf-py's `GGUFReader` alone on the same file (the reader the scan used to run);
  goal: the whole scan at least 10x faster, under 0.5 s and 150 MB;
- the hostile GGUF of attack N24 (27 MB, 3,000,000 one-byte tokens): `dflash-guard scan`,
  any verdict; goal: under 2 s and 300 MB;
- `dflash-guard fixtures make --vocab qwen3` with its tokenizer cached (skipped with
  --no-fixtures).

Each command runs as its own process; its peak resident memory is the child's own (`wait4`).

    python benchmarks/bench_gguf_scan.py [--repeat 3] [--tree PATH] [--no-fixtures]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.hostile import n24_gguf  # noqa: E402
from tests.support.llamacpp import source_tree  # noqa: E402

CLI = [sys.executable, "-m", "dflash_guard"]


def measure(command: list[str]) -> tuple[float, float]:
    """Seconds and peak resident MB of `command` as one child process (output discarded)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    began = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=env)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):
        raise SystemExit(f"{command} exited {child.returncode}")
    return seconds, usage.ru_maxrss / 1024


def best(commands: dict[str, list[str]], repeat: int) -> dict[str, tuple[float, float]]:
    """The fastest run of each command (and its memory), in rotated rounds."""
    found: dict[str, tuple[float, float]] = {}
    names = list(commands)
    for round_ in range(repeat):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            result = measure(commands[name])
            if name not in found or result[0] < found[name][0]:
                found[name] = result
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", type=Path, help="a llama.cpp tree (default: the pinned one)")
    parser.add_argument("--no-fixtures", action="store_true")
    args = parser.parse_args()
    tree = args.tree or source_tree()
    vocab = tree / "models" / "ggml-vocab-qwen2.gguf"
    print(f"best of {args.repeat}, load average " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as scratch:
        hostile = n24_gguf(Path(scratch) / "n24.gguf")
        hostile_mb = hostile.stat().st_size / 1e6
        reader = f"from gguf import GGUFReader; GGUFReader({str(vocab)!r})"
        commands = {
            "scan": [*CLI, "scan", str(vocab)],
            "reader": [sys.executable, "-c", reader],
            "hostile": [*CLI, "scan", str(hostile)],
        }
        if not args.no_fixtures:
            out = str(Path(scratch) / "pair")
            commands["fixtures"] = [*CLI, "fixtures", "make", out, "--force", "--vocab", "qwen3",
                                    "--llamacpp-tree", str(tree)]
            measure(commands["fixtures"])  # builds the tokenizer into the cache if it is not
        found = best(commands, args.repeat)
    scan, read, bad = found["scan"], found["reader"], found["hostile"]
    print(f"{vocab.name} ({vocab.stat().st_size / 1e6:.1f} MB): scan {scan[0]:.2f} s "
          f"{scan[1]:.0f} MB, GGUFReader alone {read[0]:.2f} s {read[1]:.0f} MB; "
          f"reader/scan {read[0] / scan[0]:.1f}x (goal >= 10x, scan < 0.5 s, < 150 MB)")
    print(f"N24 GGUF (3,000,000 tokens, {hostile_mb:.0f} MB): scan "
          f"{bad[0]:.2f} s {bad[1]:.0f} MB (goal < 2 s, < 300 MB)")
    if "fixtures" in found:
        fix = found["fixtures"]
        print(f"fixtures make --vocab qwen3, tokenizer cached: {fix[0]:.2f} s {fix[1]:.0f} MB; "
              f"fixtures/scan {fix[0] / scan[0]:.1f}x")


if __name__ == "__main__":
    main()
