"""The `dflash-guard` command line: a thin layer over the library.

Exit codes, for every command: 0 success, 1 a finding, mismatch or refusal,
2 a usage or input error.
"""

from __future__ import annotations

import os
import sys

import typer

from dflash_guard import __version__
from dflash_guard.cli import (
    advisory_cmd,
    audit_cmd,
    difftest_cmd,
    fixtures_cmd,
    gate_cmd,
    lock_cmd,
    policy_cmd,
    scan_cmd,
    sign_cmd,
    verify_cmd,
)
from dflash_guard.cli.common import stderr
from dflash_guard.errors import EXIT_ERROR, Error
from dflash_guard.formats.text import markup_safe

app = typer.Typer(
    name="dflash-guard",
    help="Lock, scan, verify, diff-test and gate DFlash speculative-decoding deploys.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dflash-guard {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Lock, scan, verify, diff-test and gate DFlash speculative-decoding deploys."""


for module in (
    lock_cmd,
    verify_cmd,
    scan_cmd,
    difftest_cmd,
    fixtures_cmd,
    policy_cmd,
    sign_cmd,
    gate_cmd,
    audit_cmd,
    advisory_cmd,
):
    module.register(app)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning errors into one line and exit code 2."""
    try:
        app(args=argv, standalone_mode=True)
    except Error as error:
        stderr.print(f"[bold red]error:[/] {markup_safe(error.diagnostics())}", highlight=False,
                     soft_wrap=True)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        stderr.print("[bold red]interrupted[/]")
        sys.exit(130)
    except Exception as error:  # noqa: BLE001 - the contract is "never a traceback"
        if os.environ.get("DFLASH_GUARD_DEBUG"):
            raise
        stderr.print(
            f"[bold red]internal error:[/] {type(error).__name__}: {markup_safe(str(error))} "
            "(set DFLASH_GUARD_DEBUG=1 for the traceback)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_ERROR)
