"""A vLLM serve command resolved by the pinned vLLM's own argument parser.

The parser runs in the python of the vLLM venv (`python -I`, a subprocess with a clean
environment and a time limit per command; no server is started, nothing of vLLM is imported
here). The subprocess is kept for the next command of this process (importing vLLM's argument
modules is the slow part) and stopped at exit. It
applies everything the engine would: `--config FILE.yaml` (its keys ahead of the command line),
dotted `--x.y` arguments merged into their JSON setting, `_` for `-`, argparse abbreviations,
`vllm serve MODEL`. What comes back is every setting's resolved value and its default, and the
parser's option spellings (so the pass-through list is tested against the real parser).
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

TIMEOUT_S = 300.0  # importing vLLM's argument modules takes about 10 s on an idle machine
MAX_OUTPUT_BYTES = 8 << 20
_SCRIPT = r"""
import contextlib, io, json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
def parser():
    return make_arg_parser(FlexibleArgumentParser(prog="vllm-serve"))
base = parser()
options = {s: [a.dest, a.nargs] for s, a in base._option_string_actions.items()}
defaults = vars(base.parse_args([]))
for line in sys.stdin:
    messages = io.StringIO()
    try:
        with contextlib.redirect_stderr(messages):
            resolved, error = vars(parser().parse_args(json.loads(line))), None
    except SystemExit:
        resolved, error = None, "the parser refused the command"
    except Exception as exc:
        resolved, error = None, f"{type(exc).__name__}: {exc}"
    print(json.dumps({"options": options, "defaults": defaults, "resolved": resolved,
                      "error": error, "messages": messages.getvalue()[-4000:]}, default=repr),
          flush=True)
"""


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What vLLM's parser made of a command (`values` None: it refused, `error` says why)."""

    values: Mapping[str, Any] | None
    defaults: Mapping[str, Any]
    options: Mapping[str, tuple[str, Any]]  # spelling -> (settings name, argparse nargs)
    error: str | None

    def changed(self) -> dict[str, Any]:
        """The settings the command sets to something other than the default."""
        values = self.values or {}
        return {name: value for name, value in values.items()
                if value != self.defaults.get(name)}


_WORKERS: dict[str, subprocess.Popen[str]] = {}  # one parser process per python, reused
_LOGS: dict[str, IO[bytes]] = {}  # each worker's stderr (a file: a pipe could fill and block)


def _stop_workers() -> None:
    for worker in _WORKERS.values():
        worker.kill()
        worker.wait()
    for log in _LOGS.values():
        log.close()
    _WORKERS.clear()
    _LOGS.clear()


atexit.register(_stop_workers)


def _worker(python: str) -> subprocess.Popen[str]:
    worker = _WORKERS.get(python)
    if worker is not None and worker.poll() is None:
        return worker
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
    log = _LOGS[python] = tempfile.TemporaryFile()  # noqa: SIM115 (closed with its worker)
    try:
        worker = subprocess.Popen([python, "-I", "-c", _SCRIPT], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                                  start_new_session=True)
    except OSError as failed:
        raise InputError(f"cannot run {python}: {failed.strerror}") from None
    _WORKERS[python] = worker
    return worker


def _answer(python: str, worker: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
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
    _WORKERS.pop(python, None)
    log = _LOGS.pop(python)
    log.seek(0)
    stderr = log.read()[-MAX_OUTPUT_BYTES:].decode("utf-8", "replace")
    log.close()
    if not ready:
        raise InputError(f"vLLM's argument parser ({python}) did not answer in {timeout:g} s")
    last = (stderr.strip().splitlines() or ["no output"])[-1]
    raise InputError(f"{python} cannot run vLLM's argument parser (pass --program, the python "
                     f"of the venv holding the pinned vLLM): {last}")


def resolve(python: str, args: list[str], timeout: float = TIMEOUT_S) -> Resolved:
    """`args` (the command line after the program) as vLLM in `python` parses it."""
    worker = _worker(python)
    assert worker.stdin is not None
    try:
        worker.stdin.write(json.dumps(args) + "\n")
        worker.stdin.flush()
    except OSError:
        pass  # it died: `_answer` reads why
    answer = _answer(python, worker, timeout)
    error = answer["error"]
    if error is not None:
        lines = [line for line in answer["messages"].splitlines() if "error:" in line]
        error = lines[-1].split("error:", 1)[1].strip() if lines else error
    options = {spelling: (dest, nargs) for spelling, (dest, nargs) in answer["options"].items()}
    return Resolved(answer["resolved"], answer["defaults"], options, error)
