"""The endpoint diff's wall time against the engines' own time for the same requests (issue 27).

For each engine (llama.cpp with `-np N` slots, vLLM's CPU build), starts a baseline and a DFlash
candidate on the built-in pair (head_dim 64 for vLLM), then times in rotated rounds, best of
--repeat:
  - engine: the exact requests the diff sends (`CompletionClient.completion_request`), posted
    raw to both engines at once, N in flight on each, bodies read and dropped: the engines' own
    time;
  - diff: `run_endpoint_diff` with `concurrency=N` over the same prompts (parsing, comparing).
Prints both and the ratio diff/engine; goal (issue 27): at most 1.2 for each engine. Needs the
engines `make engine` builds (llama.cpp's llama-server, the pinned vLLM venv).

    python benchmarks/bench_engine_speed.py [--engines llama.cpp vllm] [--concurrency 4]
        [--repeat 3] [--prompt-copies 2] [--max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.lossless.endpoint import EndpointOptions, run_endpoint_diff  # noqa: E402
from dflash_guard.lossless.endpoint.engine import EngineEndpoint  # noqa: E402
from dflash_guard.lossless.prompts import read_prompts  # noqa: E402
from kernels_ref.fixtures import make_fixture_pair  # noqa: E402
from kernels_ref.prompts import DEFAULT_PROMPTS, PromptSpec  # noqa: E402
from tests.support.llamacpp import build_server, convert, free_port, llama_server  # noqa: E402
from tests.support.vllm import SERVE_ARGS, install, vllm_servers  # noqa: E402


@contextlib.contextmanager
def llamacpp_pair(folder: Path, slots: int) -> Iterator[tuple[str, str]]:
    """A baseline and a DFlash candidate llama-server on the built-in pair, `slots` each."""
    binary = build_server()
    target, drafter = make_fixture_pair(folder / "hf")
    target_gguf = convert(target, folder / "gguf" / "target.gguf")
    drafter_gguf = convert(drafter, folder / "gguf" / "drafter.gguf", target_dir=target)
    with (llama_server(binary, target_gguf, slots=slots) as baseline,
          llama_server(binary, target_gguf, drafter_gguf, slots=slots) as candidate):
        yield baseline.url, candidate.url


@contextlib.contextmanager
def vllm_pair(folder: Path, slots: int) -> Iterator[tuple[str, str]]:
    """A baseline and a DFlash candidate vLLM server on the built-in pair at head_dim 64."""
    python = str(install())
    target, drafter = make_fixture_pair(folder / "hd64", head_dim=64)
    common = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
              "--host", "127.0.0.1", "--served-model-name", "m", "--max-model-len", "256",
              "--max-num-seqs", str(max(slots, 4)), *SERVE_ARGS]
    speculative = json.dumps({"method": "dflash", "model": str(drafter),
                              "num_speculative_tokens": 7})
    with vllm_servers([*common, "--port", str(free_port())],
                      [*common, "--port", str(free_port()),
                       "--speculative-config", speculative]) as (baseline, candidate):
        yield baseline.url, candidate.url


def engine_time(urls: tuple[str, str], prompts: list[PromptSpec], concurrency: int,
                max_new_tokens: int) -> Callable[[], None]:
    """Post the diff's own requests to both engines at once, `concurrency` in flight on each."""
    requests = []
    for url in urls:
        with EngineEndpoint(url).client("engine") as client:
            model = client.first_model()
            requests.append([client.completion_request(p, model=model,
                                                       max_tokens=max_new_tokens)
                             for p in prompts])

    def run() -> None:
        with (httpx2.Client(timeout=600.0) as http,
              ThreadPoolExecutor(max_workers=concurrency) as left,
              ThreadPoolExecutor(max_workers=concurrency) as right):
            def post(request: tuple[str, dict[str, object]]) -> None:
                response = http.post(request[0], json=request[1])
                response.raise_for_status()

            answered = [pool.submit(post, r) for pool, each in zip((left, right), requests,
                                                                    strict=True) for r in each]
            for future in answered:
                future.result()
    return run


def diff_time(urls: tuple[str, str], prompts: list[PromptSpec], concurrency: int,
              max_new_tokens: int) -> Callable[[], None]:
    """The endpoint diff of the two engines at `concurrency`."""
    options = EndpointOptions(EngineEndpoint(urls[0]), EngineEndpoint(urls[1]),
                              max_new_tokens=max_new_tokens, concurrency=concurrency)

    def run() -> None:
        report = run_endpoint_diff(options, prompts)
        assert report.identical, [r.prompt_id for r in report.results if r.divergence]
    return run


def best_of(contenders: dict[str, Callable[[], None]], repeat: int) -> dict[str, float]:
    """Wall seconds of each contender, best of `repeat` rotated rounds."""
    best = dict.fromkeys(contenders, float("inf"))
    names = list(contenders)
    for round_ in range(repeat):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            start = time.perf_counter()
            contenders[name]()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["llama.cpp", "vllm"],
                        choices=["llama.cpp", "vllm"])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--prompt-copies", type=int, default=2,
                        help="passes over the shipped prompt set per round")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    prompts = read_prompts(DEFAULT_PROMPTS) * args.prompt_copies
    starters = {"llama.cpp": llamacpp_pair, "vllm": vllm_pair}
    print(f"{len(prompts)} prompts, {args.max_new_tokens} tokens, concurrency "
          f"{args.concurrency} on each engine, best of {args.repeat}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for name in args.engines:
        with tempfile.TemporaryDirectory() as tmp, \
                starters[name](Path(tmp), args.concurrency) as urls:
            shape = (urls, prompts, args.concurrency, args.max_new_tokens)
            contenders = {"engine": engine_time(*shape), "diff": diff_time(*shape)}
            contenders["engine"]()  # warm-up: first requests pay the engines' lazy set-up
            seconds = best_of(contenders, args.repeat)
            print(f"{name:9}  engine {seconds['engine']:6.2f} s  diff {seconds['diff']:6.2f} s  "
                  f"diff / engine {seconds['diff'] / seconds['engine']:.2f}x (goal: 1.2x)")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
