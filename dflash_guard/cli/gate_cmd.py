"""`dflash-guard gate`: approve a deploy (exit 0) or refuse it with the reason (exit 1)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.audit_cmd import parse_clones
from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import Identities, Issuer, PublicKeys, Quiet, extra_signers
from dflash_guard.cli.verify_cmd import parse_roots
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text.gate import render_gate
from dflash_guard.gate import ApprovalSigning, EndpointOverrides, GateOptions, run_gate
from dflash_guard.lossless.reference import parse_fault


def gate(
    lock_path: Annotated[Path, typer.Option("--lock", help="Lockfile to gate.")] = Path(
        "dflash.lock"),
    policy: Annotated[str | None, typer.Option(
        "--policy", help="default, strict or dev (always the built-in policies), or a policy "
                         "file given as a path (./p.yaml).")] = None,
    root: Annotated[list[str] | None, typer.Option(
        "--root", help="ROLE=DIR: where that artifact lives (repeatable).")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Where to write the approval record (only on approval).")] = None,
    sign: Annotated[bool, typer.Option(
        "--sign", metavar="", help="Sign the approval record with Sigstore (keyless).")] = False,
    key: Annotated[Path | None, typer.Option(
        "--key", help="Sign the approval record with this ECDSA P-256 key (PEM).")] = None,
    trust_root: Annotated[Path | None, typer.Option(
        "--trust-root", help="Sigstore trusted root (JSON) for offline verification.")] = None,
    download: Annotated[bool, typer.Option(
        "--download", metavar="",
        help="Fetch artifacts missing from the HF cache at the pinned SHA.")
    ] = False,
    device: Annotated[str, typer.Option("--device", help="Diff-test device.")] = "cpu",
    inject: Annotated[str | None, typer.Option(
        "--inject", hidden=True, help="Diff-test with a planted fault (demonstrations).")
    ] = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", min=1, help="Diff-test torch CPU threads (default: from the model's size).")
    ] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", help="Endpoint diff: the baseline engine's URL (overrides the policy's).")
    ] = None,
    candidate: Annotated[str | None, typer.Option(
        "--candidate", help="Endpoint diff: the candidate engine's URL (overrides the policy's).")
    ] = None,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", help="Endpoint diff and rollout: the environment variable holding the "
                              "API key, sent only to --baseline and --candidate.")] = None,
    engine_repo: Annotated[list[str] | None, typer.Option(
        "--engine-repo", help="NAME=PATH: a local git clone of a locked engine (or Hub repo), "
                              "for the advisory audit's GIT ranges (repeatable).")] = None,
    public_key: PublicKeys = None,
    identity: Identities = None,
    issuer: Issuer = None,
    fmt: Annotated[PlainFormat, typer.Option("--format", help="text or json.")
                   ] = PlainFormat.text,
    quiet: Quiet = False,
) -> None:
    """Run every check of a deploy in order; exit 0 approved, 1 refused, 2 usage/input error.

    Example: dflash-guard gate --root target=pair/target --root drafter=pair/drafter
    """
    options = GateOptions(
        lock_path, policy, parse_roots(root or []), out=out,
        signing=ApprovalSigning(sigstore=sign, key=key, interactive=sys.stdin.isatty()),
        trust_root=trust_root, download=download, device=device, inject=parse_fault(inject),
        threads=threads, endpoints=EndpointOverrides(baseline, candidate, api_key_env),
        engine_repos=parse_clones(engine_repo or []),
        signers=extra_signers(public_key, identity, issuer),
    )
    with progress(quiet) as shown:
        result = run_gate(options, shown)
    finish(result, fmt, render_gate)


def register(app: typer.Typer) -> None:
    """Add `gate` to `app`."""
    app.command("gate")(gate)
