"""Pieces every command shares: the two consoles, where progress goes, and "render the report,
then exit"."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer

from dflash_guard.errors import InputError
from dflash_guard.fileio import write_atomic
from dflash_guard.formats import OutputFormat, PlainFormat, Report, exit_code
from dflash_guard.progress import NO_PROGRESS, Progress

if TYPE_CHECKING:
    from pathlib import Path

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
    from dflash_guard.formats.terminal import safe_console, stream_width

    stream = sys.stderr if name == "stderr" else sys.stdout
    console = globals()[name] = safe_console(stderr=name == "stderr", soft_wrap=True,
                                             width=stream_width(stream))
    return console


def _console(name: str) -> Console:
    made: Console | None = globals().get(name)
    return made if made is not None else __getattr__(name)


def finish(report: R, output_format: PlainFormat | OutputFormat,
           render_text: Callable[[R, Console], None], *, output: Path | None = None,
           quiet: bool = False, render_sarif: Callable[[R], str] | None = None) -> NoReturn:
    """The one way a report leaves a command: as text (`render_text`), JSON or SARIF
    (`render_sarif`) on stdout, or written atomically to `output` (then where it went and the
    verdict on stderr); then exit with its exit code."""
    if output_format == OutputFormat.sarif and render_sarif is not None:
        text = render_sarif(report)
    elif output_format == OutputFormat.json:
        from dflash_guard.formats.json import render

        text = render(report)
    elif output is not None:
        from dflash_guard.formats.terminal import OFF_TERMINAL_WIDTH, safe_console

        console = safe_console(record=True, width=OFF_TERMINAL_WIDTH, file=io.StringIO())
        render_text(report, console)
        text = console.export_text()
    else:
        render_text(report, _console("stdout"))
        raise typer.Exit(exit_code(report))
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        try:
            write_atomic(output, text)
        except OSError as error:
            raise InputError(f"{output}: cannot write the report "
                             f"({error.strerror or error})") from None
        summary = getattr(report, "summary", None)  # a findings report's one-line verdict
        report_written(output, summary() if callable(summary) else
                       ("passed" if report.passed else "failed"), quiet)
    raise typer.Exit(exit_code(report))


def report_written(output: object, verdict: str, quiet: bool = False) -> None:
    """Say on stderr where a report written to a file went (not with `--quiet`), then its
    one-line verdict (always, the last line), so a CI log and the action's annotation say why
    a job failed even when the report itself is only in the file."""
    console = _console("stderr")
    if not quiet:
        console.print(f"report written to {output}", highlight=False, markup=False)
    console.print(verdict, highlight=False, markup=False)


@contextmanager
def progress(quiet: bool) -> Iterator[Progress]:
    """Where a command's long work reports (`dflash_guard.progress`): nowhere with `--quiet`,
    transient bars when stderr is a terminal, plain lines when it is not (CI logs); never on
    stdout. Print the report after the block: the bars are cleared when it ends."""
    if quiet:
        yield NO_PROGRESS
    elif sys.stderr.isatty():
        from dflash_guard.formats.progress import BarProgress

        with BarProgress(_console("stderr")) as bars:
            yield bars
    else:
        from dflash_guard.formats.progress import LineProgress

        yield LineProgress(sys.stderr)
