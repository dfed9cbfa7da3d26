"""`dflash-guard advisory new`: write an OSV advisory for a team's own finding.

The record is validated against the OSV schema before it is written (atomically); sign it with
`dflash-guard sign FILE` and publish it as a feed for `dflash-guard audit --advisories`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.audit_cmd import SEVERITY_METAVAR
from dflash_guard.cli.common import stderr
from dflash_guard.severity import Severity

advisory_app = typer.Typer(
    help="Write OSV advisories for engines, Hub repos and packages.", no_args_is_help=True,
    add_completion=False,
)


@advisory_app.command("new")
def new(
    advisory_id: Annotated[str, typer.Option(
        "--id", help="The advisory id: a known database prefix, or x_ for your own "
                     "(e.g. x_ACME-2026-0001).")],
    summary: Annotated[str, typer.Option("--summary", help="One line saying what is wrong.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the advisory (JSON).")],
    engine: Annotated[str | None, typer.Option(
        "--engine", help="Subject: an engine's git repository URL.")] = None,
    hf_repo: Annotated[str | None, typer.Option(
        "--hf-repo", help="Subject: a Hugging Face repo ORG/NAME (target, drafter, GGUF).")
    ] = None,
    pypi: Annotated[str | None, typer.Option("--pypi", help="Subject: a PyPI package name.")
                    ] = None,
    introduced: Annotated[list[str] | None, typer.Option(
        "--introduced", help="First affected commit or version; 0 for 'from the start' "
                             "(repeatable).")] = None,
    fixed: Annotated[list[str] | None, typer.Option(
        "--fixed", help="Commit or version that fixes it (repeatable).")] = None,
    last_affected: Annotated[list[str] | None, typer.Option(
        "--last-affected", help="Last affected commit or version (instead of --fixed).")
    ] = None,
    limit: Annotated[list[str] | None, typer.Option(
        "--limit", help="Only commits below this one are affected (GIT ranges; repeatable).")
    ] = None,
    version: Annotated[list[str] | None, typer.Option(
        "--version", help="An exact affected commit (Hub repo, engine) or version "
                          "(repeatable).")] = None,
    severity: Annotated[Severity, typer.Option(
        "--severity", parser=Severity.parse, metavar=SEVERITY_METAVAR,
        show_default=Severity.high.name)] = Severity.high,
    details: Annotated[str, typer.Option("--details", help="Longer description (Markdown).")
                       ] = "",
    alias: Annotated[list[str] | None, typer.Option(
        "--alias", help="Another id of the same issue, e.g. a CVE (repeatable).")] = None,
    reference: Annotated[list[str] | None, typer.Option(
        "--reference", help="A URL with more information (repeatable).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")
                     ] = False,
) -> None:
    """Write a schema-valid OSV advisory for one engine, Hub repo or PyPI package.

    Example: dflash-guard advisory new --id x_ACME-1 --summary leak --engine URL --out adv.json
    """
    from dflash_guard.audit.author import AdvisorySubject, Events, new_advisory, write_advisory

    record = new_advisory(
        advisory_id, AdvisorySubject(engine=engine, hf_repo=hf_repo, pypi=pypi), summary=summary,
        severity=severity, details=details,
        events=Events(tuple(introduced or ()), tuple(fixed or ()), tuple(last_affected or ()),
                      tuple(limit or ())),
        versions=tuple(version or ()), aliases=tuple(alias or ()),
        references=tuple(reference or ()),
    )
    write_advisory(record, out, force=force)
    stderr.print(f"wrote {out} ({advisory_id})", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add `advisory` to `app`."""
    app.add_typer(advisory_app, name="advisory")
