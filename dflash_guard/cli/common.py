"""Pieces every command shares: the two consoles, and "render the report, then exit"."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer

from dflash_guard.formats import PlainFormat, Report, exit_code

if TYPE_CHECKING:
    from rich.console import Console

# Reports go to stdout; progress, warnings and errors to stderr, so `--format json` stays parseable.
# Both consoles are made on first use (see `__getattr__`): a clean scan never imports rich.
# Both escape control characters in every string they print (formats/terminal.py).
stdout: Console
stderr: Console

R = TypeVar("R", bound=Report)


def __getattr__(name: str) -> Console:
    """`stdout` and `stderr`: rich consoles, made once, when first imported or used."""
    if name not in ("stdout", "stderr"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from dflash_guard.formats.terminal import safe_console

    console = globals()[name] = safe_console(stderr=name == "stderr", soft_wrap=True)
    return console


def _console(name: str) -> Console:
    made: Console | None = globals().get(name)
    return made if made is not None else __getattr__(name)


def finish(report: R, output_format: PlainFormat, render_text: Callable[[R, Console], None],
           ) -> NoReturn:
    """Print `report` as JSON or with `render_text` on stdout, then exit with its exit code."""
    if output_format is PlainFormat.json:
        from dflash_guard.formats.json import print_json

        print_json(report.to_json())
    else:
        render_text(report, _console("stdout"))
    raise typer.Exit(exit_code(report))


def progress(message: str, output_format: PlainFormat) -> None:
    """A progress line on stderr for text output (JSON runs stay quiet)."""
    if output_format is PlainFormat.text:
        _console("stderr").print(message, highlight=False, markup=False)
