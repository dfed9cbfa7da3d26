"""Benchmark the scan of GGUF files with real vocabularies: where the seconds go.

Scans the pinned llama.cpp tree's vocabulary GGUFs (Qwen2's 151,936 tokens, Llama 3's 128,256
and their merges: the header a real drafter GGUF carries) and times, best of --repeat each, in
rotated rounds: our bounded header walk (`check_layout`, the baseline), the `gguf` package's
`GGUFReader` alone, and the whole `scan_gguf_file`. Prints seconds and the ratios reader/walk
and scan/walk. No goal yet: this measures where a scan of a real GGUF waits.

    python benchmarks/bench_gguf_scan.py [--repeat 2] [--tree PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gguf import GGUFReader  # noqa: E402

from dflash_guard.scan.gguf_check import scan_gguf_file  # noqa: E402
from kernels_ref.gguf_reader import read_gguf  # noqa: E402
from tests.support.llamacpp import source_tree  # noqa: E402

VOCABS = ("qwen2", "llama-bpe")


def walk(path: Path) -> None:
    with path.open("rb") as handle, read_gguf(handle):
        pass


def read(path: Path) -> None:
    GGUFReader(path)


def scan(path: Path) -> None:
    assert scan_gguf_file(path, path.name) == []  # real files: no finding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--tree", type=Path, help="a llama.cpp tree (default: the pinned one)")
    args = parser.parse_args()
    tree = args.tree or source_tree()
    print(f"best of {args.repeat}, load average " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    contenders: dict[str, Callable[[Path], None]] = {"walk": walk, "reader": read, "scan": scan}
    for vocab in VOCABS:
        path = tree / "models" / f"ggml-vocab-{vocab}.gguf"
        best = dict.fromkeys(contenders, float("inf"))
        for round_ in range(args.repeat):
            names = list(contenders)
            for name in names[round_ % 3:] + names[:round_ % 3]:
                began = time.perf_counter()
                contenders[name](path)
                best[name] = min(best[name], time.perf_counter() - began)
        print(f"{path.name} ({path.stat().st_size / 1e6:.1f} MB): walk {best['walk']:.2f} s, "
              f"GGUFReader {best['reader']:.2f} s, whole scan {best['scan']:.2f} s; "
              f"reader/walk {best['reader'] / best['walk']:.1f}x, "
              f"scan/walk {best['scan'] / best['walk']:.1f}x", flush=True)


if __name__ == "__main__":
    main()
