"""A vLLM serve command resolved by the pinned vLLM's own argument parser.

The parser runs in the python of the vLLM venv (`python -I`, a subprocess with a clean
environment and a time limit; no server is started, nothing of vLLM is imported here). It
applies everything the engine would: `--config FILE.yaml` (its keys ahead of the command line),
dotted `--x.y` arguments merged into their JSON setting, `_` for `-`, argparse abbreviations,
`vllm serve MODEL`. What comes back is every setting's resolved value and its default, and the
parser's option spellings (so the pass-through list is tested against the real parser).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Mapping
from typing import Any

from dflash_guard.errors import InputError

TIMEOUT_S = 300.0  # importing vLLM's argument modules takes about 10 s on an idle machine
MAX_OUTPUT_BYTES = 8 << 20
_SCRIPT = r"""
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
args = json.loads(sys.stdin.read())
def parser():
    return make_arg_parser(FlexibleArgumentParser(prog="vllm-serve"))
options = {s: [a.dest, a.nargs] for s, a in parser()._option_string_actions.items()}
defaults = vars(parser().parse_args([]))
try:
    resolved = vars(parser().parse_args(args))
    error = None
except SystemExit:
    resolved, error = None, "the parser refused the command (its message is above)"
except Exception as exc:
    resolved, error = None, f"{type(exc).__name__}: {exc}"
sys.stdout.write("\n" + json.dumps({"options": options, "defaults": defaults,
                                    "resolved": resolved, "error": error}, default=repr))
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


def resolve(python: str, args: list[str], timeout: float = TIMEOUT_S) -> Resolved:
    """`args` (the command line after the program) as vLLM in `python` parses it."""
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
    try:
        done = subprocess.run([python, "-I", "-c", _SCRIPT], input=json.dumps(args),
                              capture_output=True, text=True, timeout=timeout, env=env,
                              check=False)
    except subprocess.TimeoutExpired:
        raise InputError(f"vLLM's argument parser ({python}) did not answer in "
                         f"{timeout:g} s") from None
    except OSError as failed:
        raise InputError(f"cannot run {python}: {failed.strerror}") from None
    tail = done.stdout[-MAX_OUTPUT_BYTES:].rsplit("\n", 1)[-1]
    try:
        answer = json.loads(tail) if done.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"{python} cannot run vLLM's argument parser (pass --program, the "
                         f"python of the venv holding the pinned vLLM): {last}")
    error = answer["error"]
    if error is not None:
        lines = [line for line in done.stderr.splitlines() if "error:" in line]
        error = lines[-1].split("error:", 1)[1].strip() if lines else error
    options = {spelling: (dest, nargs) for spelling, (dest, nargs) in answer["options"].items()}
    return Resolved(answer["resolved"], answer["defaults"], options, error)
