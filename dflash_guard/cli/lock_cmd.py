"""`dflash-guard lock` and `dflash-guard export requirements`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import OutputFormat, print_json, stderr, stdout
from dflash_guard.errors import EXIT_FINDING, InputError
from dflash_guard.fileio import write_atomic
from dflash_guard.formats.terminal import markup_safe, terminal_safe
from dflash_guard.pins.lockfile import load_lockfile, write_lockfile
from dflash_guard.pins.resolve import build_lock, requirements_text

export_app = typer.Typer(help="Export parts of a lockfile.", no_args_is_help=True)


def lock(
    target: Annotated[
        str, typer.Option("--target", help="ORG/NAME\\[@REV], an HF-cache snapshot or a folder.")
    ],
    drafter: Annotated[
        str, typer.Option("--drafter", help="ORG/NAME\\[@REV], an HF-cache snapshot or a folder.")
    ],
    gguf: Annotated[
        str | None, typer.Option("--gguf", help="Optional GGUF source, same forms.")
    ] = None,
    engine: Annotated[
        list[str] | None, typer.Option("--engine", help="NAME=GIT_URL@SHA40\\[#REF], repeatable.")
    ] = None,
    package: Annotated[
        list[str] | None,
        typer.Option(
            "--package", help="NAME==VERSION@sha256:HEX|FILE\\[,...] or a wheel path, repeatable."
        ),
    ] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="Lockfile to write.")] = Path(
        "dflash.lock"
    ),
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="text or json.")
    ] = OutputFormat.text,
) -> None:
    """Pin target, drafter (and gguf) revisions, engine SHAs and package hashes into a lockfile.

    Example: dflash-guard lock --target Qwen/Qwen3-8B --drafter z-lab/Qwen3-8B-DFlash-b16
    """
    if not output.parent.is_dir():
        raise InputError(f"-o {output}: folder {output.parent} does not exist")
    sources = {"target": target, "drafter": drafter}
    if gguf:
        sources["gguf"] = gguf
    result = build_lock(sources, engine or [], package or [])
    if result.lock is None:
        stderr.print(f"[bold red]refused:[/] {markup_safe(result.outcome.reason)}", highlight=False)
        raise typer.Exit(EXIT_FINDING)
    lockfile = result.lock
    write_lockfile(lockfile, output)
    if fmt is OutputFormat.json:
        print_json(
            {
                "lockfile": str(output),
                "digest": lockfile.digest(),
                "artifacts": {a.role: a.label for a in lockfile.artifacts},
            }
        )
        return
    for a in lockfile.artifacts:
        stdout.print(f"{a.role:8} {terminal_safe(a.label)}  ({len(a.files)} files)",
                     highlight=False, markup=False)
    stdout.print(f"wrote {terminal_safe(str(output))} ({lockfile.digest()})", highlight=False,
                 markup=False)


@export_app.command("requirements")
def export_requirements(
    lock_path: Annotated[Path, typer.Option("--lock", help="Lockfile to read.")] = Path(
        "dflash.lock"
    ),
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="File to write (default stdout).")
    ] = None,
) -> None:
    """Write a pip --require-hashes requirements file for the locked packages.

    Example: dflash-guard export requirements --lock lockfiles/release.lock -o release.txt
    """
    text = requirements_text(load_lockfile(lock_path))
    if output is not None and not output.parent.is_dir():
        raise InputError(f"-o {output}: folder {output.parent} does not exist")
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_atomic(output, text)


def register(app: typer.Typer) -> None:
    """Add `lock` and `export requirements` to `app`."""
    app.command("lock")(lock)
    app.add_typer(export_app, name="export")
