"""llama.cpp in the tests: the pinned build (scripts/build-llamacpp.sh), conversions with its own
converter, and llama-server processes on free 127.0.0.1 ports, always stopped.

The engine cache is the real one (`~/.cache/dflash-guard/llama.cpp/<sha256>`, or
`DFLASH_GUARD_CACHE_DIR` as the session started with), not the per-test private cache the root
conftest sets: the build takes minutes the first time and nothing afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-llamacpp.sh"
SESSION_CACHE_DIR = os.environ.get("DFLASH_GUARD_CACHE_DIR")  # read before any test changes it
STARTUP_TIMEOUT_S = 120.0


class EngineUnavailable(RuntimeError):
    """The pinned llama.cpp could not be built or converted with: a failure, never a skip."""


def engine_script(script: Path, *args: str, timeout: float) -> str:
    """The last line `script` (scripts/build-llamacpp.sh, install-vllm.sh, install-sglang.sh)
    prints, run with this Python and the session's engine cache; `EngineUnavailable` when it
    fails."""
    env = {**os.environ, "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("DFLASH_GUARD_CACHE_DIR", None)
    if SESSION_CACHE_DIR:
        env["DFLASH_GUARD_CACHE_DIR"] = SESSION_CACHE_DIR
    done = subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise EngineUnavailable(f"{script.name} {args[0]} failed ({done.returncode}):\n"
                                f"{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def _script(*args: str, timeout: float) -> str:
    return engine_script(SCRIPT, *args, timeout=timeout)


@functools.cache
def build_server(timeout: float = 3600.0) -> Path:
    """The pinned llama-server (built once, then cached; waits for a build in progress); the
    script runs once per test process (it costs seconds: a Python start and a lockfile read)."""
    return Path(_script("build", timeout=timeout))


@functools.cache
def source_tree(timeout: float = 1200.0) -> Path:
    """The pinned llama.cpp source tree (its `models/` has vocab GGUFs, vectors, templates);
    the script runs once per test process."""
    return Path(_script("tree", timeout=timeout))


def session_cache_dir() -> Path:
    """The dflash-guard cache the session started with (built tokenizers are kept there)."""
    if SESSION_CACHE_DIR:
        return Path(SESSION_CACHE_DIR)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dflash-guard"


def convert(model_dir: Path, out: Path, target_dir: Path | None = None,
            outtype: str = "f32") -> Path:
    """`model_dir` converted to an `outtype` (f32) GGUF at `out` (+ `out.conversion.json`).

    The converter runs once per test process for the same input: folders with the same name
    and contents (the output does not depend on where they are), the same outtype and output
    name (the record names the output); a second request gets copies of the first conversion's
    two files (many modules convert the built-in pair, about 10 s each)."""
    key = (_contents(model_dir), _contents(target_dir) if target_dir is not None else "",
           outtype, out.name)
    done = _CONVERTED.get(key)
    if done is None:
        extra = ("--target-model-dir", str(target_dir)) if target_dir is not None else ()
        done = Path(_script("convert", str(model_dir), str(out), "--outtype", outtype, *extra,
                            timeout=600))
        kept = Path(tempfile.mkdtemp(prefix="dflash-guard-conversion-")) / done.name
        atexit.register(shutil.rmtree, kept.parent, True)
        shutil.copyfile(done, kept)
        shutil.copyfile(_record(done), _record(kept))
        _CONVERTED[key] = kept
        return done
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(done, out)
    shutil.copyfile(_record(done), _record(out))
    return out


_CONVERTED: dict[tuple[str, str, str, str], Path] = {}  # this process's conversions: a copy each


def _record(gguf: Path) -> Path:
    return gguf.with_name(gguf.name + ".conversion.json")


def _contents(folder: Path) -> str:
    """The folder's name and every file's relative name and bytes, as one sha256."""
    digest = hashlib.sha256(Path(folder).resolve().name.encode() + b"\0")
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Server:
    url: str
    log: Path

    @property
    def metrics(self) -> str:
        return self.url + "/metrics"


@contextlib.contextmanager
def llama_server(binary: Path, target: Path, drafter: Path | None = None, *, slots: int = 1,
                 draft_max: int = 7, context: int = 128, extra: tuple[str, ...] = (),
                 preexec: Callable[[], None] | None = None) -> Iterator[Server]:
    """`llama-server` on `target` (DFlash with `drafter`), on a free port; stopped on exit;
    `extra` arguments are appended to its command line; `preexec` runs in the child before
    the exec (a Landlock ruleset's `enforce`)."""
    port = free_port()
    command = [str(binary), "-m", str(target), "--host", "127.0.0.1", "--port", str(port),
               "-c", str(context * slots), "-np", str(slots), "-t", "1", "--metrics",
               "--no-webui", "--seed", "0"]
    if drafter is not None:
        command += ["-md", str(drafter), "--spec-type", "draft-dflash",
                    "--spec-draft-n-max", str(draft_max)]
    command += extra
    with serving(command, port, preexec) as server:
        yield server


@contextlib.contextmanager
def serving(command: list[str], port: int, preexec: Callable[[], None] | None = None,
            ) -> Iterator[Server]:
    """A server process (`command`, listening on 127.0.0.1:`port`), ready when its `/health`
    answers 200; its output in `Server.log`; stopped on exit."""
    with tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log",
                                     delete=False) as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   preexec_fn=preexec)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise EngineUnavailable(f"{command[0]} exited {process.returncode}:\n"
                                        f"{Path(log.name).read_text()[-3000:]}")
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(url + "/health", timeout=2.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise EngineUnavailable(f"{command[0]} not ready in {STARTUP_TIMEOUT_S:g} s")
            time.sleep(0.2)
        yield Server(url, Path(log.name))
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        Path(log.name).unlink(missing_ok=True)


def tamper_one_weight(path: Path, tensor: str, index: int, value: float) -> None:
    """Set element `index` of `tensor` in a GGUF file to `value` (in place; f32 tensors)."""
    from gguf import GGUFReader

    reader = GGUFReader(path, "r+")
    data = next(t for t in reader.tensors if t.name == tensor).data
    data.reshape(-1)[index] = value
    data.flush()  # a numpy memmap of the file


def swap_vocab_entries(target_dir: Path, out: Path, a: int, b: int) -> Path:
    """A copy of the target folder whose tokenizer.json swaps token ids `a` and `b`."""
    import json
    import shutil

    shutil.copytree(target_dir, out)
    document = json.loads((out / "tokenizer.json").read_text())
    vocab = document["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    vocab[by_id[a]], vocab[by_id[b]] = b, a
    (out / "tokenizer.json").write_text(json.dumps(document))
    return out
