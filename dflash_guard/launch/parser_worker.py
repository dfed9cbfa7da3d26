"""An engine's own argument parser, run in the engine's python as a long-lived subprocess.

The worker is `python -I -c SCRIPT` with a clean environment (nothing of the engine is
imported here): it reads one JSON request a line on stdin and answers one JSON object a line.
Importing an engine's argument modules is the slow part, so a worker is kept for the next
command of this process and stopped at exit. A worker that dies, prints something that is not
a JSON object or stays silent past the time limit is killed, and the caller gets an
`InputError` naming the last line of its stderr.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import select
import subprocess
import tempfile
from collections.abc import Mapping
from typing import IO, Any

from dflash_guard.errors import InputError

TIMEOUT_S = 300.0  # importing vLLM's or SGLang's argument modules takes 10-20 s when idle
MAX_OUTPUT_BYTES = 8 << 20


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What an engine's parser made of a command (`values` None: it refused, `error` says why)."""

    values: Mapping[str, Any] | None
    defaults: Mapping[str, Any]
    options: Mapping[str, tuple[str, Any]]  # spelling -> (settings name, argparse nargs)
    error: str | None

    def changed(self) -> dict[str, Any]:
        """The settings the command sets to something other than the default."""
        values = self.values or {}
        return {name: value for name, value in values.items()
                if value != self.defaults.get(name)}


_Key = tuple[str, str]  # (python, script)
_WORKERS: dict[_Key, subprocess.Popen[str]] = {}  # one parser process per python and script
_LOGS: dict[_Key, IO[bytes]] = {}  # each worker's stderr (a file: a pipe could fill and block)


def _stop_workers() -> None:
    for worker in _WORKERS.values():
        worker.kill()
        worker.wait()
    for log in _LOGS.values():
        log.close()
    _WORKERS.clear()
    _LOGS.clear()


atexit.register(_stop_workers)


def _worker(key: _Key, env: Mapping[str, str]) -> subprocess.Popen[str]:
    worker = _WORKERS.get(key)
    if worker is not None and worker.poll() is None:
        return worker
    python, script = key
    clean = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    log = _LOGS[key] = tempfile.TemporaryFile()  # noqa: SIM115 (closed with its worker)
    try:
        worker = subprocess.Popen([python, "-I", "-c", script], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log, text=True,
                                  env={**clean, **env}, start_new_session=True)
    except OSError as failed:
        raise InputError(f"cannot run {python}: {failed.strerror}") from None
    _WORKERS[key] = worker
    return worker


def _answer(key: _Key, worker: subprocess.Popen[str], timeout: float, engine: str
            ) -> dict[str, Any]:
    """The worker's next line, parsed; `InputError` past `timeout` or when it died."""
    assert worker.stdout is not None
    ready, _, _ = select.select([worker.stdout], [], [], timeout)
    line = worker.stdout.readline(MAX_OUTPUT_BYTES) if ready else ""
    try:
        answer = json.loads(line) if line else None
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        return answer
    worker.kill()
    worker.wait()
    _WORKERS.pop(key, None)
    log = _LOGS.pop(key)
    log.seek(0)
    stderr = log.read()[-MAX_OUTPUT_BYTES:].decode("utf-8", "replace")
    log.close()
    python = key[0]
    if not ready:
        raise InputError(f"{engine}'s argument parser ({python}) did not answer in {timeout:g} s")
    last = (stderr.strip().splitlines() or ["no output"])[-1]
    raise InputError(f"{python} cannot run {engine}'s argument parser (pass --program, the "
                     f"python of the venv holding the pinned {engine}): {last}")


def ask(python: str, script: str, request: object, *, engine: str, env: Mapping[str, str],
        timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """`request` sent to the worker running `script` in `python` (started with `env` added to
    a clean environment), and its answer."""
    key = (python, script)
    worker = _worker(key, env)
    assert worker.stdin is not None
    try:
        worker.stdin.write(json.dumps(request) + "\n")
        worker.stdin.flush()
    except OSError:
        pass  # it died: `_answer` reads why
    return _answer(key, worker, timeout, engine)


def resolved(answer: Mapping[str, Any]) -> Resolved:
    """A worker's answer (`resolved`, `defaults`, `options`, `error`, `messages`) as a
    `Resolved`; a refusal's reason is the parser's own `error:` line when it printed one."""
    error = answer["error"]
    if error is not None:
        lines = [line for line in answer["messages"].splitlines() if "error:" in line]
        error = lines[-1].split("error:", 1)[1].strip() if lines else error
    options = {spelling: (dest, nargs) for spelling, (dest, nargs) in answer["options"].items()}
    return Resolved(answer["resolved"], answer["defaults"], options, error)
