"""`dflash-guard verify-approval RECORD`: is this approval about the policy it is checked under,
signed by an accepted signer, and is the disk exactly what it approved?"""

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
from dflash_guard.formats.text.approval import render_approval
from dflash_guard.trust.closure import policy_closure
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.provenance import check_approval


def verify_approval(
    record: Annotated[Path, typer.Argument(metavar="RECORD",
                                           help="The approval record `gate --output` wrote.")],
    policy: Annotated[str | None, typer.Option(
        "--policy", metavar="POLICY",
        help="The policy the record must have been approved under, whose "
             "signatures.approvals signers must have signed it (a built-in name, "
             "or a file given as a path).")] = None,
    accept_policy_digest: Annotated[list[str] | None, typer.Option(
        "--accept-policy-digest", metavar="DIGEST",
        help="Also accept a record approved under the policy whose closure has "
             "this digest (the record's policy.digest, sha256:HEX; repeatable).")] = None,
    root: Roots = None,
    lock: LockPath = Path("dflash.lock"),
    public_key: PublicKeys = None,
    identity: Identities = None,
    identity_regexp: IdentityRegexps = None,
    issuer: Issuer = None,
    trust_root: TrustRoot = None,
    offline: Offline = False,
    bundle: BundleFile = None,
    signature_only: Annotated[bool, typer.Option(
        "--signature-only", help="Check the policy and signature, not the disk.")
    ] = False,
    fmt: Annotated[PlainFormat, typer.Option("--format", metavar="[text|json]",
                                             help="text or json.")
                   ] = PlainFormat.text, as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Check an approval record's policy, signature and files; exit 0 verified, 1 not.

    The record must name the policy's closure: its text and the sha256 of every file it names
    (feeds, keys, prompt sets, comparison records), recomputed here from --policy.

    Example: dflash-guard verify-approval approval.json --policy ./prod.yaml --lock dflash.lock
    --root target=models/target --root drafter=models/drafter
    """
    fmt = chosen_format(fmt, as_json)
    loaded = load_policy(policy)
    closure = policy_closure(loaded)  # the policy's own files, before any operator's key
    accepted = loaded.accepting(extra_signers(public_key, identity, issuer, identity_regexp))
    with progress(quiet) as shown:  # hashing every approved file can take minutes
        verdict = check_approval(
            record, accepted, roots=None if signature_only else parse_roots(root or []),
            lock_path=None if signature_only else lock,
            accepted_policies=tuple(accept_policy_digest or ()),
            trust_root=trusted_root(trust_root, offline), bundle=bundle, closure=closure,
            progress=shown)
    finish(verdict, fmt, render_approval)


def register(app: typer.Typer) -> None:
    """Add `verify-approval` to `app`."""
    app.command("verify-approval")(verify_approval)
