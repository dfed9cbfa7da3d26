"""An SGLang serve command resolved by the pinned SGLang's own argument parser.

The parser runs in the python of the SGLang venv (scripts/install-sglang.sh: `sglang` 0.5.23
installed without its CUDA dependencies beside the pinned vLLM venv's torch and transformers),
through `parser_worker` (`python -I`, a clean environment, a time limit; no server is started,
nothing of SGLang is imported here). The worker calls what the engine calls at start-up:
`prepare_server_args(argv)` (`sglang/srt/server_args.py`: argparse over `ServerArgs`'
fields, a `--config FILE.yaml` merged ahead of the command line, argparse abbreviations), and
for `sglang serve` first the two rewrites of `sglang/cli/serve.py` (`--model-type` taken out,
a positional model turned into `--model-path`). What comes back is each command-line setting
as `ServerArgs` holds it (raw: SGLang resolves defaults such as the tokenizer path or the
memory fraction later, at `resolve_once`), its default, and the parser's option spellings.
"""

from __future__ import annotations

import dataclasses

from dflash_guard.launch.parser_worker import TIMEOUT_S, Resolved, ask, resolved

_SCRIPT = r"""
import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs, prepare_server_args
base = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(base)
options = {s: [a.dest, a.nargs] for s, a in base._option_string_actions.items()}
defaults = {a.dest: a.default for a in base._actions if a.dest != "help"}
for line in sys.stdin:
    request, messages = json.loads(line), io.StringIO()
    resolved = error = backend = None
    try:
        with contextlib.redirect_stderr(messages), contextlib.redirect_stdout(messages):
            argv = request["argv"]
            if request["serve"]:
                from sglang.cli.serve import (_extract_model_type_override,
                                              _normalize_positional_model_path)
                backend, argv = _extract_model_type_override(argv)
                argv, _ = _normalize_positional_model_path(argv)
            args = prepare_server_args(argv)
            resolved = {name: getattr(args, name) for name in defaults if hasattr(args, name)}
    except SystemExit:
        error = "the parser refused the command"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"options": options, "defaults": defaults, "resolved": resolved,
                      "backend": backend, "error": error,
                      "messages": messages.getvalue()[-4000:]}, default=repr), flush=True)
"""
ENV = {"HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"}


@dataclasses.dataclass(frozen=True)
class SGLangResolved(Resolved):
    """`Resolved`, and for `sglang serve` the backend `--model-type` asked for (`auto`, `llm`,
    `diffusion`...; None for `python -m sglang.launch_server`)."""

    backend: str | None = None


def resolve(python: str, args: list[str], *, serve: bool = False,
            timeout: float = TIMEOUT_S) -> SGLangResolved:
    """`args` (the command line after `python -m sglang.launch_server`, or after `sglang serve`
    with `serve`) as SGLang in `python` parses it."""
    answer = ask(python, _SCRIPT, {"argv": args, "serve": serve}, engine="SGLang", env=ENV,
                 timeout=timeout)
    found = resolved(answer)
    backend = answer.get("backend")
    return SGLangResolved(found.values, found.defaults, found.options, found.error,
                          backend if isinstance(backend, str) else None)
