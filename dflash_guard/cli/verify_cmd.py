"""`dflash-guard verify`: compare what is on disk with the lockfile, byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import (
    BundleFile,
    Identities,
    IdentityRegexps,
    Issuer,
    Json,
    LockPath,
    Offline,
    PublicKeys,
    Quiet,
    Roots,
    TrustRoot,
    chosen_format,
    extra_signers,
    parse_roots,
    trusted_root,
)
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text.verify import render_verify
from dflash_guard.pins.lockfile import load_lockfile
from dflash_guard.pins.verify import verify_lock
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.signing import verify_signatures
from dflash_guard.trust.verified import VerifiedLock


def verify(
    lock_path: LockPath = Path("dflash.lock"),
    root: Roots = None,
    download: Annotated[
        bool, typer.Option("--download",
                           help="Fetch missing artifacts at the pinned SHA.")
    ] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache",
                           help="Ignore the stat cache; hash everything.")
    ] = False,
    policy: Annotated[
        str | None,
        typer.Option("--policy", metavar="POLICY",
                     help="Policy naming the accepted signers: default, strict, dev "
                          "(always the built-in ones) or a file given as a path (./p.yaml)."),
    ] = None,
    trust_root: TrustRoot = None,
    offline: Offline = False,
    bundle: BundleFile = None,
    public_key: PublicKeys = None,
    identity: Identities = None,
    identity_regexp: IdentityRegexps = None,
    issuer: Issuer = None,
    fmt: Annotated[
        PlainFormat, typer.Option("--format", metavar="[text|json]", help="text or json.")
    ] = PlainFormat.text, as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Check every locked file on disk: missing, extra, size and sha256 (exit 1 on any mismatch).

    Example: dflash-guard verify --root target=pair/target --root drafter=pair/drafter
    """
    fmt = chosen_format(fmt, as_json)
    # bad flags and a bad policy fail before the lockfile is read or anything hashed
    accepted = load_policy(policy).accepting(
        extra_signers(public_key, identity, issuer, identity_regexp))
    trust_root = trusted_root(trust_root, offline)
    lockfile = load_lockfile(lock_path)
    with progress(quiet) as shown:
        report = verify_lock(lockfile, parse_roots(root or []), download=download,
                             use_cache=not no_cache, progress=shown)
    # Signatures: the lockfile's when one exists or the policy requires it; each model.sig.
    signatures = verify_signatures(lock_path, lockfile, report.locations, accepted,
                                   trust_root=trust_root, bundle_file=bundle)
    finish(VerifiedLock(str(lock_path), lockfile.digest(), report, tuple(signatures)), fmt,
           render_verify)


def register(app: typer.Typer) -> None:
    """Add `verify` to `app`."""
    app.command("verify")(verify)
