"""`dflash-guard gate`: approve a deploy (exit 0) or refuse it with the reason (exit 1)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import (
    Identities,
    IdentityRegexps,
    Issuer,
    Json,
    LockPath,
    Offline,
    PassphraseEnv,
    PublicKeys,
    Quiet,
    Roots,
    TrustRoot,
    chosen_format,
    extra_signers,
    key_passphrase,
    parse_clones,
    parse_roots,
    trusted_root,
)
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text.gate import render_gate
from dflash_guard.gate import ApprovalSigning, EndpointOverrides, GateOptions, run_gate
from dflash_guard.lossless.reference import parse_fault


def gate(
    lock_path: LockPath = Path("dflash.lock"),
    policy: Annotated[str | None, typer.Option(
        "--policy", metavar="POLICY",
        help="default, strict or dev (always the built-in policies), or a policy "
             "file given as a path (./p.yaml).")] = None,
    root: Roots = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="FILE",
        help="Where to write the approval record (only on approval).")] = None,
    sign: Annotated[bool, typer.Option(
        "--sign", help="Sign the approval record with Sigstore (keyless).")] = False,
    key: Annotated[Path | None, typer.Option(
        "--key", metavar="PEM",
        help="Sign the approval record with this ECDSA private key (PEM).")] = None,
    passphrase_env: PassphraseEnv = "COSIGN_PASSWORD",
    trust_root: TrustRoot = None,
    offline: Offline = False,
    bundle: Annotated[Path | None, typer.Option(
        "--bundle", metavar="FILE",
        help="The lockfile's signature bundle to check (key or Sigstore), instead of the ones "
             "beside it.")] = None,
    download: Annotated[bool, typer.Option(
        "--download",
        help="Fetch artifacts missing from the HF cache at the pinned SHA.")
    ] = False,
    device: Annotated[str, typer.Option("--device", metavar="[cpu|cuda]",
                                        help="Diff-test device.")] = "cpu",
    inject: Annotated[str | None, typer.Option(
        "--inject", hidden=True, help="Diff-test with a planted fault (demonstrations).")
    ] = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", metavar="N", min=1,
        help="Diff-test torch CPU threads (default: from the model's size).")
    ] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", metavar="URL",
        help="Endpoint diff: the baseline engine's URL (overrides the policy's).")
    ] = None,
    candidate: Annotated[str | None, typer.Option(
        "--candidate", metavar="URL",
        help="Endpoint diff: the candidate engine's URL (overrides the policy's).")
    ] = None,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", metavar="VAR",
        help="Endpoint diff and rollout: the environment variable holding the "
             "API key, sent only to --baseline and --candidate.")] = None,
    engine_repo: Annotated[list[str] | None, typer.Option(
        "--engine-repo", metavar="NAME=DIR",
        help="NAME=PATH: a local git clone of a locked engine (or Hub repo), "
             "for the advisory audit's GIT ranges (repeatable).")] = None,
    public_key: PublicKeys = None,
    identity: Identities = None,
    identity_regexp: IdentityRegexps = None,
    issuer: Issuer = None,
    fmt: Annotated[PlainFormat, typer.Option("--format", metavar="[text|json]",
                                             help="text or json.")
                   ] = PlainFormat.text, as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Run every check of a deploy in order; exit 0 approved, 1 refused, 2 usage/input error.

    Example: dflash-guard gate --root target=pair/target --root drafter=pair/drafter
    """
    fmt = chosen_format(fmt, as_json)
    options = GateOptions(
        lock_path, policy, parse_roots(root or []), out=output,
        signing=ApprovalSigning(sigstore=sign, key=key, interactive=sys.stdin.isatty(),
                                passphrase=key_passphrase(passphrase_env)),
        trust_root=trusted_root(trust_root, offline), lock_bundle=bundle, download=download,
        device=device, inject=parse_fault(inject),
        threads=threads, endpoints=EndpointOverrides(baseline, candidate, api_key_env),
        engine_repos=parse_clones(engine_repo or []),
        signers=extra_signers(public_key, identity, issuer, identity_regexp),
    )
    with progress(quiet) as shown:
        result = run_gate(options, shown)
    finish(result, fmt, render_gate)


def register(app: typer.Typer) -> None:
    """Add `gate` to `app`."""
    app.command("gate")(gate)
