"""What the Landlock ruleset of `launch --exec` costs an engine (issue 44, item 4).

llama.cpp's DFlash `llama-server` on the built-in pair (f32 GGUF), started alternately
unconfined and under the ruleset `launch --exec` builds (`engine_ruleset`: the two GGUF files,
the engine's folder, the system folders, the serving port), in rotated rounds:
  - start-up: from just before the ruleset is built (confined) or the process is started
    (unconfined) to the first 200 from `/health`, polled every 10 ms;
  - decode throughput: --requests sequential completions of --max-new-tokens tokens each,
    generated tokens per second of wall time.
Prints the median of each over --rounds and the ratios confined/unconfined; the issue's goals:
start-up at most 1.05x, throughput at least 0.98x. Needs the llama-server `make engine` builds.

    python benchmarks/bench_confine.py [--rounds 5] [--requests 4] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.launch.confine import engine_ruleset  # noqa: E402
from kernels_ref.fixtures import make_fixture_pair  # noqa: E402
from tests.support.llamacpp import build_server, convert, free_port  # noqa: E402

PROMPT = "def binary_search(items, target):\n"


@contextlib.contextmanager
def started(command: list[str], url: str, preexec: Callable[[], None] | None,
            ) -> Iterator[None]:
    """`command` running until `url/health` answers 200 (raises if it exits first)."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   preexec_fn=preexec)
        try:
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"llama-server exited: {log.read()[-2000:]!r}")
                with contextlib.suppress(httpx2.TransportError):
                    if httpx2.get(url + "/health", timeout=1.0).status_code == 200:
                        break
                time.sleep(0.01)
            yield
        finally:
            process.terminate()
            process.wait(timeout=30)


def one_run(engine: Path, target: Path, drafter: Path, scratch: Path, confined: bool,
            requests: int, tokens: int) -> tuple[float, float]:
    """(start-up seconds, generated tokens per second) of one server."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(engine), "-m", str(target), "-md", str(drafter), "--spec-type",
               "draft-dflash", "--host", "127.0.0.1", "--port", str(port), "-c", "512",
               "-np", "1", "-t", "1", "--seed", "0"]
    begin = time.perf_counter()
    built = None
    if confined:
        built = engine_ruleset("llama.cpp", engine, [target, drafter], port, scratch).build()
    try:
        with started(command, url, built.enforce if built else None):
            startup = time.perf_counter() - begin
            generated, wall = 0, 0.0
            for _ in range(requests):
                clock = time.perf_counter()
                answer = httpx2.post(url + "/completion", timeout=120.0, json={
                    "prompt": PROMPT, "n_predict": tokens, "temperature": 0,
                    "cache_prompt": False})
                wall += time.perf_counter() - clock
                answer.raise_for_status()
                generated += int(answer.json()["tokens_predicted"])
    finally:
        if built is not None:
            built.close()
    return startup, generated / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    engine = build_server()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        target_hf, drafter_hf = make_fixture_pair(root / "hf")
        target = convert(target_hf, root / "gguf" / "target.gguf")
        drafter = convert(drafter_hf, root / "gguf" / "drafter.gguf", target_dir=target_hf)
        (root / "scratch").mkdir()
        results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for index in range(args.rounds):
            order = (False, True) if index % 2 == 0 else (True, False)
            for confined in order:
                results[confined].append(one_run(engine, target, drafter, root / "scratch",
                                                 confined, args.requests,
                                                 args.max_new_tokens))
    medians = {mode: (statistics.median(s for s, _ in runs), statistics.median(t for _, t in runs))
               for mode, runs in results.items()}
    for mode, name in ((False, "unconfined"), (True, "confined")):
        startup, throughput = medians[mode]
        print(f"{name:10}  start-up {startup:6.3f} s  decode {throughput:7.1f} tokens/s")
    startup_ratio = medians[True][0] / medians[False][0]
    throughput_ratio = medians[True][1] / medians[False][1]
    print(f"ratio       start-up {startup_ratio:.3f}x (goal <= 1.05)  decode "
          f"{throughput_ratio:.3f}x (goal >= 0.98)")
    print(f"{args.rounds} rounds, {args.requests} x {args.max_new_tokens} tokens; load average "
          f"after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
