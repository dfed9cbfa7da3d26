"""`dflash-guard verify-installed NAME`: an installed Python distribution against the lock that
pins it (files, RECORD, the locked wheel) and what its code can do
(`dflash_guard/trust/installed.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish
from dflash_guard.cli.options import Format, Json, LockPath, Quiet, chosen_format
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text.installed import render_installed
from dflash_guard.pins.lockfile import load_lockfile
from dflash_guard.trust.installed import candidate_wheels, check_installed


def verify_installed(
    name: Annotated[str, typer.Argument(metavar="NAME",
                                        help="The installed distribution, e.g. dflash.")],
    lock_path: LockPath = Path("dflash.lock"),
    path: Annotated[list[Path] | None, typer.Option(
        "--path", metavar="DIR", help="site-packages folder to look in (repeatable; default: "
                                      "this Python's).")] = None,
    wheel: Annotated[list[Path] | None, typer.Option(
        "--wheel", metavar="FILE", help="The locked wheel (repeatable): RECORD is compared "
                                        "with the wheel's when its sha256 is the lock's.")] = None,
    wheelhouse: Annotated[Path | None, typer.Option(
        "--wheelhouse", metavar="DIR", help="A folder of wheels to find the locked one in "
                                            "(default: ./.wheelhouse when there is one; pip's "
                                            "cache is searched too).")] = None,
    fmt: Format = PlainFormat.text, as_json: Json = False, quiet: Quiet = False,
) -> None:
    """Check an installed package against its lock: every RECORD file's hash, files RECORD does
    not list, bytecode, the locked wheel's RECORD; then list its network, process and
    credential capabilities (exit 1 on any file problem).

    Example: dflash-guard verify-installed dflash --lock lockfiles/dflash-client.lock
    """
    fmt = chosen_format(fmt, as_json)
    check = check_installed(load_lockfile(lock_path), name, paths=path or None,
                            wheels=candidate_wheels(wheel or [], wheelhouse))
    finish(check, fmt, render_installed)


def register(app: typer.Typer) -> None:
    """Add `verify-installed` to `app`."""
    app.command("verify-installed")(verify_installed)
