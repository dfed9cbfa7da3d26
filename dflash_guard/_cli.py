"""The `dflash-guard` command line: a thin layer over the library.

Exit codes, for every command: 0 success, 1 a finding, mismatch or refusal,
2 a usage or input error. Only the module of the command being run is imported (all of them for
the top-level help), so `scan` does not pay for what `verify`, `gate` or `difftest` import.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from dflash_guard import __version__
from dflash_guard.errors import EXIT_ERROR, Error
from dflash_guard.fileio import guard_inputs

# Top-level command name -> the module in dflash_guard/cli/ that registers it (help order).
COMMAND_MODULES = {
    "lock": "lock_cmd",
    "export": "lock_cmd",
    "verify": "verify_cmd",
    "scan": "scan_cmd",
    "difftest": "difftest_cmd",
    "fixtures": "fixtures_cmd",
    "policy": "policy_cmd",
    "sign": "sign_cmd",
    "review": "review_cmd",
    "gate": "gate_cmd",
    "audit": "audit_cmd",
    "advisory": "advisory_cmd",
    "monitor": "monitor_cmd",
    "bench": "bench_cmd",
    "launch": "launch_cmd",
    "verify-approval": "approval_cmd",
}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dflash-guard {__version__}")
        raise typer.Exit(0)


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Lock, scan, verify, diff-test and gate DFlash speculative-decoding deploys."""


def build_app(command: str | None = None) -> typer.Typer:
    """The CLI app with `command` registered, or every command when it names none of them."""
    app = typer.Typer(
        name="dflash-guard",
        help="Lock, scan, verify, diff-test and gate DFlash speculative-decoding deploys.",
        epilog="Example: dflash-guard verify --lock dflash.lock. Shell completion: "
        "dflash-guard --install-completion (bash, zsh, fish, PowerShell).",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    wanted = COMMAND_MODULES.get(command or "")
    for module in dict.fromkeys([wanted] if wanted else COMMAND_MODULES.values()):
        importlib.import_module(f"dflash_guard.cli.{module}").register(app)
    return app


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning errors into one line and exit code 2."""
    args = sys.argv[1:] if argv is None else argv
    command = next((arg for arg in args if not arg.startswith("-")), None)
    try:
        if command == "difftest":
            from dflash_guard.cli.difftest_cmd import upgrade_args

            args = upgrade_args(args)
        with guard_inputs():  # no output of the command replaces a file it read
            build_app(command)(args=args, standalone_mode=True)
    except Error as error:
        _print_error("error:", error.diagnostics())
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        _print_error("interrupted", "")
        sys.exit(130)
    except Exception as error:  # noqa: BLE001 - the contract is "never a traceback"
        if os.environ.get("DFLASH_GUARD_DEBUG"):
            raise
        _print_error(
            "internal error:",
            f"{type(error).__name__}: {error} (set DFLASH_GUARD_DEBUG=1 for the traceback)",
        )
        sys.exit(EXIT_ERROR)


def _print_error(label: str, text: str) -> None:
    """`label text` on stderr, the label in bold red and `text` never read as markup, its
    control characters (and newlines: it is one line) shown as escapes."""
    from dflash_guard.cli.common import stderr
    from dflash_guard.formats.terminal import markup_safe

    line = f"[bold red]{label}[/] {markup_safe(text)}" if text else f"[bold red]{label}[/]"
    stderr.print(line, highlight=False, soft_wrap=True)
