"""A vLLM serve command resolved by the pinned vLLM's own argument parser.

The parser runs in the python of the vLLM venv (`parser_worker`: `python -I`, a subprocess with
a clean environment and a time limit per command, kept for the next command; no server is
started, nothing of vLLM is imported here). It applies everything the engine would: `--config
FILE.yaml` (its keys ahead of the command line), dotted `--x.y` arguments merged into their JSON
setting, `_` for `-`, argparse abbreviations, `vllm serve MODEL`. What comes back is every
setting's resolved value and its default, and the parser's option spellings (so the
pass-through list is tested against the real parser).
"""

from __future__ import annotations

from dflash_guard.launch.parser_worker import TIMEOUT_S, Resolved, ask, resolved

__all__ = ["Resolved", "resolve"]

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

ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def resolve(python: str, args: list[str], timeout: float = TIMEOUT_S) -> Resolved:
    """`args` (the command line after the program) as vLLM in `python` parses it."""
    return resolved(ask(python, _SCRIPT, args, engine="vLLM", env=ENV, timeout=timeout))
