"""What the Landlock ruleset of `launch --exec` costs an engine (issue 44, item 4).

The engine on the built-in pair with its DFlash drafter (llama.cpp's `llama-server` on f32
GGUF; with `--engine vllm`, vLLM's CPU build at head_dim 64, `--enforce-eager`), started
alternately unconfined and under the ruleset `launch --exec` builds (`confinement`: the pair's
files, the engine's install, the system folders, its ports; the same scratch variables for
both), in rotated rounds:
  - start-up: from just before the ruleset is built (confined) or the process is started
    (unconfined) to the first 200 from `/health`, polled every 5 ms (both sides spawned
    through a preexec hook, so both fork alike);
  - decode throughput: --requests sequential completions of --max-new-tokens tokens each,
    generated tokens per second of wall time.
Prints the median of each over --rounds and the ratios confined/unconfined; the issue's goals:
start-up at most 1.05x, throughput at least 0.98x. Needs the engines `make engine` builds.

    python benchmarks/bench_confine.py [--engine llama.cpp|vllm] [--rounds 5] [--requests 8]
        [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.launch.confine import confinement  # noqa: E402
from kernels_ref.fixtures import make_fixture_pair  # noqa: E402
from tests.support.llamacpp import build_server, convert, free_port  # noqa: E402
from tests.support.vllm import SERVE_ARGS, SERVE_ENV, install  # noqa: E402

PROMPT = "def binary_search(items, target):\n"


@contextlib.contextmanager
def started(command: list[str], url: str, env: dict[str, str],
            preexec: Callable[[], None] | None) -> Iterator[None]:
    """`command` running until `url/health` answers 200 (raises if it exits first)."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   preexec_fn=preexec, start_new_session=True)
        try:
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"{command[0]} exited: {log.read()[-2000:]!r}")
                with contextlib.suppress(httpx2.TransportError):
                    if httpx2.get(url + "/health", timeout=1.0).status_code == 200:
                        break
                time.sleep(0.005)
            yield
        finally:
            os.killpg(process.pid, signal.SIGTERM)  # the engine and its workers
            process.wait(timeout=60)


def _nothing() -> None:
    """The unconfined side's preexec hook."""


def serve_command(engine: str, program: Path, target: Path, drafter: Path,
                  port: int) -> list[str]:
    """The DFlash server's command line (what `launch` writes, and the tests' small sizes)."""
    if engine == "llama.cpp":
        return [str(program), "-m", str(target), "-md", str(drafter), "--spec-type",
                "draft-dflash", "--host", "127.0.0.1", "--port", str(port), "-c", "512",
                "-np", "1", "-t", "1", "--seed", "0"]
    speculative = json.dumps({"method": "dflash", "model": str(drafter),
                              "num_speculative_tokens": 7})
    return [str(program), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
            "--speculative-config", speculative, "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "256", *SERVE_ARGS]


def generate(engine: str, url: str, tokens: int) -> int:
    """One greedy completion of `tokens` tokens; the tokens generated."""
    if engine == "llama.cpp":
        answer = httpx2.post(url + "/completion", timeout=300.0, json={
            "prompt": PROMPT, "n_predict": tokens, "temperature": 0, "cache_prompt": False})
        answer.raise_for_status()
        return int(answer.json()["tokens_predicted"])
    model = httpx2.get(url + "/v1/models", timeout=30.0).json()["data"][0]["id"]
    answer = httpx2.post(url + "/v1/completions", timeout=300.0, json={
        "model": model, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0,
        "ignore_eos": True})
    answer.raise_for_status()
    return int(answer.json()["usage"]["completion_tokens"])


def one_run(engine: str, program: Path, pair: tuple[Path, Path], files: list[Path],
            confined: bool, requests: int, tokens: int) -> tuple[float, float]:
    """(start-up seconds, generated tokens per second) of one server."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    begin = time.perf_counter()
    setting = confinement(engine, program, files, port)
    built = setting.ruleset.build() if confined else None
    env = {**os.environ, **SERVE_ENV, **setting.env}
    try:
        # both sides fork the same way (a preexec hook rules out vfork), as the ruleset's
        # cost is what is measured, not the harness's spawn
        with started(serve_command(engine, program, *pair, port), url, env,
                     built.enforce if built else _nothing):
            startup = time.perf_counter() - begin
            generated, wall = 0, 0.0
            for _ in range(requests):
                clock = time.perf_counter()
                generated += generate(engine, url, tokens)
                wall += time.perf_counter() - clock
    finally:
        if built is not None:
            built.close()
        shutil.rmtree(setting.scratch)
    return startup, generated / wall


def prepared(engine: str, root: Path) -> tuple[Path, tuple[Path, Path], list[Path]]:
    """(the engine's program, (target, drafter) as the engine takes them, the approved
    files)."""
    if engine == "llama.cpp":
        target_hf, drafter_hf = make_fixture_pair(root / "hf")
        target = convert(target_hf, root / "gguf" / "target.gguf")
        drafter = convert(drafter_hf, root / "gguf" / "drafter.gguf", target_dir=target_hf)
        return build_server(), (target, drafter), [target, drafter]
    target, drafter = make_fixture_pair(root / "hd64", head_dim=64)
    files = [p for folder in (target, drafter) for p in sorted(folder.iterdir())]
    return install(), (target, drafter), files


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--engine", choices=("llama.cpp", "vllm"), default="llama.cpp")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        program, pair, files = prepared(args.engine, Path(folder))
        results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for index in range(args.rounds):
            order = (False, True) if index % 2 == 0 else (True, False)
            for confined in order:
                results[confined].append(one_run(args.engine, program, pair, files, confined,
                                                 args.requests, args.max_new_tokens))
    medians = {mode: (statistics.median(s for s, _ in runs), statistics.median(t for _, t in runs))
               for mode, runs in results.items()}
    for mode, name in ((False, "unconfined"), (True, "confined")):
        startup, throughput = medians[mode]
        print(f"{name:10}  start-up {startup:6.3f} s  decode {throughput:7.1f} tokens/s")
    startup_ratio = medians[True][0] / medians[False][0]
    throughput_ratio = medians[True][1] / medians[False][1]
    print(f"ratio       start-up {startup_ratio:.3f}x (goal <= 1.05)  decode "
          f"{throughput_ratio:.3f}x (goal >= 0.98)")
    print(f"{args.engine}: {args.rounds} rounds, {args.requests} x {args.max_new_tokens} "
          f"tokens; load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
