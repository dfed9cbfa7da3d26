"""`dflash-guard verify-approval RECORD`: is this approval signed by the policy's approval
signers, and are the approved bytes the ones on disk?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish
from dflash_guard.cli.verify_cmd import parse_roots
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text.approval import render_approval
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.provenance import check_approval


def verify_approval(
    record: Annotated[Path, typer.Argument(help="The approval record `gate --out` wrote.")],
    policy: Annotated[str | None, typer.Option(
        "--policy", help="The policy whose signatures.approvals signers must have signed it "
                         "(a built-in name, or a file given as a path).")] = None,
    root: Annotated[list[str] | None, typer.Option(
        "--root", help="ROLE=DIR: check the approved files of that role against this folder "
                       "(repeatable; give every role the record names).")] = None,
    lock: Annotated[Path | None, typer.Option(
        "--lock", help="The approved lockfile, checked against the record.")] = None,
    trust_root: Annotated[Path | None, typer.Option(
        "--trust-root", help="Sigstore trusted root (JSON) for offline verification.")] = None,
    signature_only: Annotated[bool, typer.Option(
        "--signature-only", metavar="", help="Check the signature, not the files on disk.")
    ] = False,
    fmt: Annotated[PlainFormat, typer.Option("--format", help="text or json.")
                   ] = PlainFormat.text,
) -> None:
    """Check an approval record's signature and its subjects; exit 0 verified, 1 not.

    Example: dflash-guard verify-approval approval.json --policy ./prod.yaml --signature-only
    """
    verdict = check_approval(
        record, load_policy(policy),
        roots=None if signature_only else parse_roots(root or []),
        lock_path=lock, trust_root=trust_root)
    finish(verdict, fmt, render_approval)


def register(app: typer.Typer) -> None:
    """Add `verify-approval` to `app`."""
    app.command("verify-approval")(verify_approval)
