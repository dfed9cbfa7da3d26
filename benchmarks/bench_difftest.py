"""Time the default difftest on the fixture pair; compare speculative with autoregressive decoding.

    /tmp/tv/bin/python benchmarks/bench_difftest.py [--threads 1] [--block-size 8] [--device cpu]

Prints the wall time of the whole default difftest, then, over the same prompts, target forwards
and wall time of autoregressive and speculative decoding, tau, and the ratio speculative/AR.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.lossless.defaults import DEFAULT_MAX_NEW_TOKENS  # noqa: E402
from dflash_guard.lossless.local import default_stop_ids, run_difftest  # noqa: E402
from dflash_guard.lossless.options import LocalOptions  # noqa: E402
from dflash_guard.lossless.prompts import load_prompts  # noqa: E402
from kernels_ref.fixtures import make_fixture_pair  # noqa: E402
from kernels_ref.generate import generate  # noqa: E402
from kernels_ref.load import (
    load_drafter,  # noqa: E402
    load_target,  # noqa: E402
)
from kernels_ref.prompts import DEFAULT_PROMPTS  # noqa: E402
from kernels_ref.tokenizer import load_tokenizer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        target_dir, drafter_dir = make_fixture_pair(Path(tmp))
        began = time.perf_counter()
        report = run_difftest(
            LocalOptions(
                target_dir,
                drafter_dir,
                max_new_tokens=args.max_new_tokens,
                device=args.device,
                dtype=args.dtype,
                block_size=args.block_size,
                threads=args.threads,
            )
        )
        whole = time.perf_counter() - began
        print(
            f"default difftest: {whole:.2f} s, identical={report.identical}, "
            f"tau={report.tau:.2f}, {len(report.results)} prompts, threads={args.threads}"
        )
        target = load_target(target_dir, args.device, args.dtype)
        drafter = load_drafter(drafter_dir, target, args.device, args.dtype)
        prompts = load_prompts(
            DEFAULT_PROMPTS, load_tokenizer(target_dir), target.config.vocab_size
        )
        stops = default_stop_ids(target_dir)
        timings = {}
        for name, model in (("autoregressive", None), ("speculative", drafter)):
            began, forwards, tokens, steps, accepted = time.perf_counter(), 0, 0, 0, 0
            for prompt in prompts:
                budget = min(prompt.max_new_tokens or args.max_new_tokens, args.max_new_tokens)
                out = generate(
                    target,
                    model,
                    list(prompt.ids),
                    max_new_tokens=budget,
                    stop_ids=stops | prompt.stop_ids,
                    block_size=args.block_size,
                )
                forwards += out.target_forwards
                tokens += len(out.tokens)
                steps += len(out.steps)
                accepted += sum(s.accepted + 1 for s in out.steps)
            timings[name] = time.perf_counter() - began
            print(
                f"{name:>15}: {timings[name]:.2f} s, {tokens} tokens, {forwards} target "
                f"forwards, tau {accepted / max(steps, 1):.2f}"
            )
        ratio = timings["speculative"] / timings["autoregressive"]
        print(
            f"wall time ratio speculative/autoregressive: {ratio:.2f} (speed-up {1 / ratio:.2f}x)"
        )


if __name__ == "__main__":
    main()
