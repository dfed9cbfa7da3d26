"""vLLM in the tests: the pinned install (scripts/install-vllm.sh) and servers started from the
command `dflash-guard launch vllm` prints, on free 127.0.0.1 ports, always stopped.

The install cache is the real one (`~/.cache/dflash-guard/vllm/<lock digest>`, or
`DFLASH_GUARD_CACHE_DIR` as the session started with), like llama.cpp's build: minutes the
first time, nothing afterwards. A failed install fails the tests that need it (never a skip).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import httpx2

from tests.support.llamacpp import (
    EngineUnavailable,
    Server,
    engine_script,
    free_port,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-vllm.sh"
STARTUP_TIMEOUT_S = 900.0  # about 45 s each on an idle 2-core machine; far more under load
# CPU serving of the tiny pair: a 1 GiB KV cache, nothing fetched or reported; the model runs
# in the engine core's process (no third process importing torch and vLLM: 10 s of a 30 s
# start), its threads scheduled by the OS, not all pinned to CPU 0 by every server at once;
# one OpenMP thread (the default, one per core, spun waiting at every step beside the other
# workers' engines: test_vllm.py alone took 162 s of CPU instead of 108 s)
SERVE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
             "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
             "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
             "OMP_NUM_THREADS": "1"}
# what the tiny pair needs beyond what launch sets (the policy caps max_model_len at 256)
SERVE_ARGS = ("--enforce-eager", "--dtype", "float32")


GATE_DIFFTEST = "  near_tie_allowance: 0.0\n"  # the default policy's line the section follows


def gate_endpoints(baseline: str, candidate: str, max_new_tokens: int) -> str:
    """`GATE_DIFFTEST` with an endpoints section on the two engines, the candidate's counters
    read (what the gate's drafter check needs): a `write_policy` replacement."""
    return (f"{GATE_DIFFTEST}  endpoints:\n    baseline: {baseline}\n    candidate: {candidate}\n"
            f"    max_new_tokens: {max_new_tokens}\n    metrics: true\n")


@functools.cache
def install(timeout: float = 3600.0) -> Path:
    """The pinned vLLM venv's python (installed once, then cached; waits for an install in
    progress); `EngineUnavailable` when the install fails (never remembered). The script runs
    once per test process (it costs seconds: a Python start and a lockfile read)."""
    return Path(engine_script(SCRIPT, "install", timeout=timeout))


def launch_argv(*args: str) -> list[str]:
    """The argv `dflash-guard launch vllm ARGS... --format json` prints (the real CLI)."""
    done = subprocess.run([sys.executable, "-m", "dflash_guard", "launch", "vllm", "--format",
                           "json", *args], capture_output=True, text=True, check=False, cwd=ROOT,
                          timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"launch vllm exited {done.returncode}: {done.stderr}")
    return json.loads(done.stdout)["argv"]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a server and its engine processes (its own process group)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def vllm_servers(*commands: list[str], env: Mapping[str, str] | None = None,
                 preexec: Callable[[], None] | None = None) -> Iterator[list[Server]]:
    """Each argv started at once (its `--port` must be free), ready when `/v1/models` answers;
    all stopped on exit; `env` adds variables, `preexec` runs in each child before the exec
    (a Landlock ruleset's `enforce`)."""
    started: list[tuple[subprocess.Popen[bytes], Server]] = []
    try:
        for argv in commands:
            port = argv[argv.index("--port") + 1]
            with tempfile.NamedTemporaryFile("w+", prefix="vllm-", suffix=".log",
                                             delete=False) as log:
                process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           env={**os.environ, **SERVE_ENV, **(env or {})},
                                           start_new_session=True, preexec_fn=preexec)
            started.append((process, Server(f"http://127.0.0.1:{port}", Path(log.name))))
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        waiting = list(started)
        while waiting:
            for process, server in list(waiting):
                if process.poll() is not None:
                    raise EngineUnavailable(f"vLLM exited {process.returncode}:\n"
                                            f"{server.log.read_text()[-3000:]}")
                with contextlib.suppress(httpx2.TransportError):
                    if httpx2.get(server.url + "/v1/models", timeout=2.0).status_code == 200:
                        waiting.remove((process, server))
            if time.monotonic() > deadline:
                raise EngineUnavailable(f"vLLM not ready in {STARTUP_TIMEOUT_S:g} s")
            time.sleep(0.5)
        yield [server for _, server in started]
    finally:
        for process, server in started:
            _stop(process)
            server.log.unlink(missing_ok=True)


@contextlib.contextmanager
def vllm_server(python: Path, model: Path, *, max_model_len: int = 2048) -> Iterator[Server]:
    """vLLM's OpenAI server on `model` (float32, eager), served as `m`, on a free port."""
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--host", "127.0.0.1", "--port", str(free_port()), "--served-model-name", "m",
            "--max-model-len", str(max_model_len), *SERVE_ARGS]
    with vllm_servers(argv) as (server,):
        yield server
