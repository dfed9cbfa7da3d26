"""`dflash-guard audit`: match a lock's engines, Hub revisions and packages against OSV advisories.

Exit 0 clean, 1 an advisory (or an undecided range) at or above `--fail-on`, or a refused feed,
2 a usage or input error (a malformed advisory names its file and field).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dflash_guard.cli.common import finish
from dflash_guard.cli.options import (
    SEVERITY_METAVAR,
    BundleFile,
    Identities,
    IdentityRegexps,
    Issuer,
    Json,
    LockPath,
    Offline,
    PublicKeys,
    Quiet,
    TrustRoot,
    chosen_format,
    extra_signers,
    parse_clones,
    trusted_root,
)
from dflash_guard.errors import InputError
from dflash_guard.formats import OutputFormat
from dflash_guard.severity import Severity

if TYPE_CHECKING:
    from dflash_guard.audit.feeds import FeedRules
    from dflash_guard.trust.policy import Signers


def _flag_rules(fail_on: Severity | None, max_age_days: int | None, require_signed: bool,
                signers: Signers, trust_root: Path | None, bundle: Path | None
                ) -> tuple[FeedRules, Severity]:
    """The feed rules and threshold the command-line flags describe (no policy)."""
    from dflash_guard.audit.feeds import FeedRules

    rules = FeedRules(
        signers=signers, allow_unsigned=not require_signed, trust_root=trust_root,
        max_age=dt.timedelta(days=max_age_days) if max_age_days else None, bundle=bundle,
    )
    return rules, fail_on or Severity.low


def audit(
    lock: LockPath = Path("dflash.lock"),
    advisories: Annotated[list[str] | None, typer.Option(
        "--advisories", metavar="SOURCE",
        help="OSV feed: a JSON or zip file, a folder of them, or an https:// "
             "URL (repeatable).")] = None,
    engine_repo: Annotated[list[str] | None, typer.Option(
        "--engine-repo", metavar="NAME=DIR",
        help="NAME=PATH: a local git clone of a locked engine (or Hub repo "
             "ORG/NAME), to decide GIT ranges (repeatable).")] = None,
    policy: Annotated[str | None, typer.Option(
        "--policy", metavar="POLICY",
        help="Audit as this policy's advisories section says (feeds, signers, "
             "fail_on, max_age_days); --advisories adds feeds.")] = None,
    fail_on: Annotated[Severity | None, typer.Option(
        "--fail-on", parser=Severity.parse, metavar=SEVERITY_METAVAR,
        help="Fail on advisories (and undecided ranges) at or above this "
             "severity (default: low).")] = None,
    max_age_days: Annotated[int | None, typer.Option(
        "--max-age-days", metavar="DAYS", min=1,
        help="Refuse a feed whose newest record is older.")] = None,
    require_signed: Annotated[bool, typer.Option(
        "--require-signed", help="Refuse a feed file without a signature beside it.")] = False,
    public_key: PublicKeys = None,
    identity: Identities = None,
    identity_regexp: IdentityRegexps = None,
    issuer: Issuer = None,
    trust_root: TrustRoot = None,
    offline: Offline = False,
    bundle: BundleFile = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", metavar="[text|json|sarif]",
                                              help="text, json or sarif.")
                   ] = OutputFormat.text, as_json: Json = False, quiet: Quiet = False,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="FILE",
        help="Write the report to FILE (atomically), not stdout.")] = None,
) -> None:
    """Match every locked engine commit, Hub revision and package version against OSV
    advisories: exit 0 clean, 1 affected/undecided/refused feed, 2 input error.

    Example: dflash-guard audit --lock dflash.lock --advisories feeds/ --engine-repo vllm=../vllm
    """
    from dflash_guard.audit.run import run_audit, run_policy_audit
    from dflash_guard.formats.text.audit import render_audit
    from dflash_guard.trust.policy import load_policy

    fmt = chosen_format(fmt, as_json)

    clones = parse_clones(engine_repo or [])
    if policy is not None:
        given = [flag for flag, value in (
            ("--fail-on", fail_on), ("--max-age-days", max_age_days),
            ("--require-signed", require_signed), ("--public-key", public_key),
            ("--identity", identity), ("--identity-regexp", identity_regexp),
            ("--issuer", issuer), ("--bundle", bundle)) if value]
        if given:
            raise InputError(f"{given[0]} does not apply with --policy: the policy's "
                             "advisories section sets it")
        loaded = load_policy(policy)
        section = loaded.advisories
        if section is None:
            raise InputError(f"--policy {policy}: the policy has no advisories section")
        report = run_policy_audit(lock, section, extra_sources=advisories or [], clones=clones,
                                  trust_root=trusted_root(trust_root, offline),
                                  engines=loaded.engine_rules)
    else:
        if bundle is not None and not (len(advisories or []) == 1
                                       and Path((advisories or [""])[0]).is_file()):
            raise InputError("--bundle names the signature of one feed file: give exactly one "
                             "--advisories FILE with it")
        rules, threshold = _flag_rules(
            fail_on, max_age_days, require_signed,
            extra_signers(public_key, identity, issuer, identity_regexp),
            trusted_root(trust_root, offline), bundle)
        report = run_audit(lock, advisories or [], rules=rules, clones=clones, fail_on=threshold)
    from dflash_guard.formats.sarif import render_audit as sarif_audit

    finish(report, fmt, render_audit, output=output, quiet=quiet, render_sarif=sarif_audit)


def register(app: typer.Typer) -> None:
    """Add `audit` to `app`."""
    app.command("audit")(audit)
