"""The `dflash-guard` command line: a thin layer over the library.

Exit codes, for every command: 0 success, 1 a finding, mismatch or refusal,
2 a usage or input error. Only the module of the command being run is imported (all of them for
the top-level help), so `scan` does not pay for what `verify`, `gate` or `difftest` import.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, NoReturn

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from dflash_guard import __version__
from dflash_guard.errors import EXIT_ERROR, EXIT_FINDING, Error
from dflash_guard.fileio import guard_inputs

if TYPE_CHECKING:
    from typer._click.core import Context, Parameter  # typer vendors click

PROG = "dflash-guard"

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
    "verify-installed": "installed_cmd",
    "verify-app": "app_cmd",
}


class _PlainFlags:
    """Help that shows no Python type: none for a flag (`-h/--help`, `--quiet`, ...), which
    takes no value, and only the metavar for an argument. Every other option writes its metavar
    by hand (tests/cli/test_conventions.py)."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        params: list[Parameter] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
            elif isinstance(param, TyperArgument) and param.metavar is not None:
                # typer prints an argument's Python type beside its metavar (`PATH <path>`)
                param.display_type_rich = _no_type  # type: ignore[method-assign]
        return params


def _no_type(ctx: Context) -> None:
    """No type column for an argument whose metavar says what it takes."""


class Command(_PlainFlags, TyperCommand):
    """A dflash-guard command."""


class Group(_PlainFlags, TyperGroup):
    """A dflash-guard command group."""


def _conventions(app: typer.Typer) -> None:
    """Every command and group under `app` built as `Command` / `Group` (typer's own classes
    are the defaults it fills in)."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = Command
    for group in app.registered_groups:
        group.cls = Group
        if group.typer_instance is not None:
            _conventions(group.typer_instance)


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
        cls=Group,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    wanted = COMMAND_MODULES.get(command or "")
    for module in dict.fromkeys([wanted] if wanted else COMMAND_MODULES.values()):
        importlib.import_module(f"dflash_guard.cli.{module}").register(app)
    _conventions(app)
    return app


EXIT_INTERRUPTED = 130  # as a shell reports a command ended by SIGINT


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning errors into one line and exit code 2."""
    args = sys.argv[1:] if argv is None else argv
    command = next((arg for arg in args if not arg.startswith("-")), None)
    try:
        with guard_inputs():  # no output of the command replaces a file it read
            code = build_app(command)(args=args, prog_name=PROG, standalone_mode=False)
    except typer.TyperException as error:  # click's usage errors: one line, not a panel
        _usage_error(error)
    except typer.Abort:
        _print_error("aborted", "")
        sys.exit(EXIT_FINDING)
    except Error as error:
        _print_error("error:", error.diagnostics())
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except Exception as error:  # noqa: BLE001 - the contract is "never a traceback"
        if os.environ.get("DFLASH_GUARD_DEBUG"):
            raise
        _print_error(
            "internal error:",
            f"{type(error).__name__}: {error} (set DFLASH_GUARD_DEBUG=1 for the traceback)",
        )
        sys.exit(EXIT_ERROR)
    if code == EXIT_INTERRUPTED:  # typer returns Ctrl-C (KeyboardInterrupt) as exit 130
        _interrupted()
    sys.exit(code if isinstance(code, int) else 0)


def _usage_error(error: typer.TyperException) -> NoReturn:
    """A usage error as one `error:` line naming the command's help, then its exit code (2).
    The bare group (`dflash-guard policy`) has printed its help already."""
    code = getattr(error, "exit_code", EXIT_ERROR)
    if type(error).__name__ != "NoArgsIsHelpError":
        # pydantic's prefix on a parser's ValueError says nothing to a user
        message = error.format_message().replace("Value error, ", "")
        ctx = getattr(error, "ctx", None)
        hint = f" (try '{ctx.command_path} -h')" if ctx is not None else ""
        _print_error("error:", message + hint)
    sys.exit(code)


def _interrupted() -> NoReturn:
    """Ctrl-C: say the command stopped before its end (its outputs are written atomically,
    so nothing half-written is left), and exit 130 as shells do."""
    _print_error("interrupted:", "stopped by Ctrl-C before the end (outputs are written "
                                 "atomically: nothing is half-written)")
    sys.exit(EXIT_INTERRUPTED)


def _print_error(label: str, text: str) -> None:
    """`label text` on stderr, the label in bold red and `text` never read as markup, its
    control characters (and newlines: it is one line) shown as escapes."""
    from dflash_guard.cli.common import stderr
    from dflash_guard.formats.terminal import markup_safe

    line = f"[bold red]{label}[/] {markup_safe(text)}" if text else f"[bold red]{label}[/]"
    stderr.print(line, highlight=False, soft_wrap=True)
