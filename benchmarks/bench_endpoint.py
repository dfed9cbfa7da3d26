"""Throughput of the endpoint diff against two reference servers, at concurrency 1 and 8.

    /tmp/tv/bin/python benchmarks/bench_endpoint.py [--max-new-tokens 16] [--repeat 2]

Starts `kernels_ref.serve` twice on the built-in fixture pair (baseline autoregressive, candidate
speculative), runs `run_endpoint_diff` over the shipped prompt set at each concurrency, and prints
completion requests per second (two per prompt: baseline and candidate) and the ratio of
concurrency 8 to concurrency 1, measured in the same process.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.lossless.endpoint import EndpointOptions, run_endpoint_diff  # noqa: E402
from dflash_guard.lossless.endpoint.engine import EngineEndpoint  # noqa: E402
from dflash_guard.lossless.prompts import read_prompts  # noqa: E402
from kernels_ref.fixtures import make_fixture_pair  # noqa: E402
from kernels_ref.prompts import DEFAULT_PROMPTS  # noqa: E402
from tests.support.reference_server import running_server  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=2, help="passes over the prompt set")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    prompts = read_prompts(DEFAULT_PROMPTS) * args.repeat
    with tempfile.TemporaryDirectory() as tmp:
        target, drafter = make_fixture_pair(Path(tmp))
        with running_server(target) as base, running_server(target, drafter) as cand:
            engines = EngineEndpoint(base.url), EngineEndpoint(cand.url)
            warm_up = EndpointOptions(*engines, max_new_tokens=4)
            run_endpoint_diff(warm_up, prompts[:2])
            rates = {}
            for concurrency in args.concurrency:
                began = time.perf_counter()
                options = EndpointOptions(*engines, concurrency=concurrency,
                                          max_new_tokens=args.max_new_tokens)
                report = run_endpoint_diff(options, prompts)
                elapsed = time.perf_counter() - began
                rates[concurrency] = 2 * len(prompts) / elapsed
                print(f"concurrency {concurrency}: {2 * len(prompts)} requests in {elapsed:.2f} s"
                      f" = {rates[concurrency]:.1f} req/s (identical={report.identical})")
    first, *rest = args.concurrency
    for concurrency in rest:
        print(f"ratio concurrency {concurrency} / {first}: "
              f"{rates[concurrency] / rates[first]:.2f}x")


if __name__ == "__main__":
    main()
