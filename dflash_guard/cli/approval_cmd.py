"""`dflash-guard verify-approval RECORD`: is this approval signed by the policy's approval
signers, and are the approved bytes the ones on disk?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import OutputFormat, print_json, stdout
from dflash_guard.cli.verify_cmd import parse_roots
from dflash_guard.errors import EXIT_FINDING, EXIT_OK
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
    fmt: Annotated[OutputFormat, typer.Option("--format", help="text or json.")
                   ] = OutputFormat.text,
) -> None:
    """Check an approval record's signature and its subjects; exit 0 verified, 1 not.

    Example: dflash-guard verify-approval approval.json --policy ./prod.yaml --signature-only
    """
    verdict = check_approval(
        record, load_policy(policy),
        roots=None if signature_only else parse_roots(root or []),
        lock_path=lock, trust_root=trust_root)
    if fmt is OutputFormat.json:
        print_json(verdict.to_json())
    else:
        stdout.print(f"approval record {record} under policy {verdict.policy}:", highlight=False,
                     markup=False)
        for check in verdict.signatures:
            line = f"signed by {check.signer}" if check.ok else f"BAD SIGNATURE: {check.reason}"
            stdout.print(f"  {Path(check.signature).name}: {line}", highlight=False,
                         markup=False, soft_wrap=True)
        for problem in verdict.problems:
            stdout.print(f"  {problem}", highlight=False, markup=False, soft_wrap=True)
        files = "" if signature_only else f", {verdict.checked} approved files match the disk"
        stdout.print(("VERIFIED" + files) if verdict.passed else "NOT VERIFIED",
                     highlight=False, markup=False)
    raise typer.Exit(EXIT_OK if verdict.passed else EXIT_FINDING)


def register(app: typer.Typer) -> None:
    """Add `verify-approval` to `app`."""
    app.command("verify-approval")(verify_approval)
