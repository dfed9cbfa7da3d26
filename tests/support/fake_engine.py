"""A stand-in engine for `launch --verify-served` tests: launch writes its vLLM command line
(`--program` names a shim running this module), and this serves it with `kernels_ref.serve`,
so the served diff runs against a real OpenAI-compatible server in seconds.

    python -m tests.support.fake_engine [--serve-target DIR] [--serve-drafter DIR] \\
        -m vllm.entrypoints.openai.api_server --model T --speculative-config JSON --port P ...

`--serve-target` and `--serve-drafter` serve another model than the one launch named: the
drifted or swapped deploy the served diff must catch. The process becomes the server (exec),
so stopping it stops the server.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the stand-in engine runs from, readable and executable to it under launch's Landlock
# ruleset as a real engine's install is (`confine.install_folders` finds only the shim's folder):
# this checkout, this venv and the Python it links to.
INSTALL = (str(ROOT), sys.prefix, str(Path(sys.base_prefix).resolve()))


def shim(folder: Path, *, target: Path | None = None, drafter: Path | None = None) -> Path:
    """An executable `python` in `folder` that runs this module (for launch's `--program`)."""
    extra = "".join(f" {flag} '{path}'" for flag, path in
                    (("--serve-target", target), ("--serve-drafter", drafter)) if path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "python"
    path.write_text(f"#!/bin/sh\nPYTHONPATH='{ROOT}' exec '{sys.executable}' -m "
                    f"tests.support.fake_engine{extra} \"$@\"\n")
    path.chmod(0o755)
    return path


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve-target")
    parser.add_argument("--serve-drafter")
    parser.add_argument("-m")
    parser.add_argument("--model", required=True)
    parser.add_argument("--speculative-config")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", required=True)
    args, _ = parser.parse_known_args(argv)
    drafter = args.serve_drafter
    if drafter is None and args.speculative_config:
        drafter = json.loads(args.speculative_config)["model"]
    command = [sys.executable, "-m", "kernels_ref.serve", "--target",
               args.serve_target or args.model, "--host", args.host, "--port", args.port]
    if drafter:
        command += ["--drafter", drafter]
    os.execv(sys.executable, command)


if __name__ == "__main__":
    main(sys.argv[1:])
