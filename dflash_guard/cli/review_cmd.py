"""`dflash-guard review`: the capability report of each unreviewed remote-code file, the
unreviewed chat templates and generation configs, and the policy that records the review
(`dflash_guard/trust/review.py`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import (
    Format,
    Json,
    LockPath,
    Quiet,
    Roots,
    chosen_format,
    parse_roots,
)
from dflash_guard.errors import InputError
from dflash_guard.fileio import write_atomic
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text.review import render_review
from dflash_guard.formats.text.verify import render_verify
from dflash_guard.outputs import refuse_outputs_over_inputs
from dflash_guard.pins.lockfile import load_lockfile
from dflash_guard.pins.verify import verify_lock
from dflash_guard.trust.policy import BUILTIN_POLICIES, parse_policy
from dflash_guard.trust.review import find_unreviewed, policy_text
from dflash_guard.trust.verified import VerifiedLock


def review(
    lock_path: LockPath = Path("dflash.lock"),
    root: Roots = None,
    extends: Annotated[str, typer.Option(
        "--extends", metavar="NAME",
        help="Policy to extend: default, strict, dev or a policy file.")] = "default",
    reviewer: Annotated[str | None, typer.Option(
        "--reviewer", metavar="NAME",
        help="Who reviewed the code (needed with --output).")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", metavar="NAME",
        help="Name of the written policy (default: NAME-reviewed).")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="FILE",
        help="Write the policy recording the review here (atomically; never over an input).")
    ] = None,
    fmt: Format = PlainFormat.text, as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Show what each unreviewed remote-code file can do; with --output, write a policy that
    extends a built-in one with their sha256s (exit 1 while code is left unreviewed).

    Read each file and its report, then run it again with --reviewer NAME -o FILE.
    Then gate with --policy ./FILE.

    Example: dflash-guard review --root target=pair/target --root drafter=pair/drafter
    """
    fmt = chosen_format(fmt, as_json)
    if output is not None and not reviewer:
        raise InputError("--output: give --reviewer NAME too (it is recorded with each entry)")
    lock = load_lockfile(lock_path)
    roots = parse_roots(root or [])
    refuse_outputs_over_inputs([("--output", output)],
                               [("--lock", lock_path),
                                *((f"--root {role}", folder) for role, folder in roots.items())])
    with progress(quiet) as shown:
        # Every byte hashed (no stat cache): the digests written are the locked ones.
        verified = verify_lock(lock, roots, use_cache=False, progress=shown)
        found = (find_unreviewed(lock, verified.locations, extends, progress=shown)
                 if verified.passed else None)
    if found is None:  # nothing is reviewed off a disk that is not the lock: report the mismatch
        typer.echo("MISMATCH: the files differ from the lock; review what is locked", err=True)
        finish(VerifiedLock(str(lock_path), lock.digest(), verified, ()), fmt, render_verify)
    if output is not None and (found.reviewable or found.templates or found.configs):
        assert reviewer is not None
        extends_as = None
        if extends not in BUILTIN_POLICIES:  # a file: as the written policy's folder sees it
            relative = os.path.relpath(Path(extends).resolve(), output.parent.resolve())
            extends_as = relative if relative.startswith(".") else f"./{relative}"
        text = policy_text(found, reviewer, dt.datetime.now(dt.UTC).date(),
                           name or f"{Path(extends).stem}-reviewed", extends_as)
        parse_policy(text, str(output), base=output.parent)  # what the gate will load
        write_atomic(output, text)
        found = dataclasses.replace(found, written=str(output))
    finish(found, fmt, render_review)


def register(app: typer.Typer) -> None:
    """Add `review` to `app`."""
    app.command("review")(review)
