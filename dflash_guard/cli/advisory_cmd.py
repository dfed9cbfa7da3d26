"""`dflash-guard advisory new`: write an OSV advisory for a team's own finding.

The record is validated against the OSV schema before it is written (atomically); sign it with
`dflash-guard sign FILE` and publish it as a feed for `dflash-guard audit --advisories`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import stderr
from dflash_guard.cli.options import SEVERITY_METAVAR
from dflash_guard.errors import InputError
from dflash_guard.severity import Severity

advisory_app = typer.Typer(
    help="Write OSV advisories for engines, Hub repos and packages.", no_args_is_help=True,
    add_completion=False,
)


@advisory_app.command("new")
def new(
    advisory_id: Annotated[str, typer.Option(
        "--id", metavar="ID", help="The advisory id: a known database prefix, or x_ for your own "
                                   "(e.g. x_ACME-2026-0001).")],
    summary: Annotated[str, typer.Option("--summary", metavar="LINE",
                                         help="One line saying what is wrong.")],
    engine: Annotated[str | None, typer.Option(
        "--engine", metavar="URL", help="Subject: an engine's git repository URL.")] = None,
    hf_repo: Annotated[str | None, typer.Option(
        "--hf-repo", metavar="ORG/NAME",
        help="Subject: a Hugging Face repo ORG/NAME (target, drafter, GGUF).")
    ] = None,
    pypi: Annotated[str | None, typer.Option("--pypi", metavar="NAME",
                                             help="Subject: a PyPI package name.")
                    ] = None,
    introduced: Annotated[list[str] | None, typer.Option(
        "--introduced", metavar="REV",
        help="First affected commit or version; 0 for 'from the start' "
             "(repeatable).")] = None,
    fixed: Annotated[list[str] | None, typer.Option(
        "--fixed", metavar="REV", help="Commit or version that fixes it (repeatable).")] = None,
    last_affected: Annotated[list[str] | None, typer.Option(
        "--last-affected", metavar="REV",
        help="Last affected commit or version (instead of --fixed).")
    ] = None,
    limit: Annotated[list[str] | None, typer.Option(
        "--limit", metavar="REV",
        help="Only commits below this one are affected (GIT ranges; repeatable).")
    ] = None,
    version: Annotated[list[str] | None, typer.Option(
        "--version", metavar="REV", help="An exact affected commit (Hub repo, engine) or version "
                                         "(repeatable).")] = None,
    severity: Annotated[Severity, typer.Option(
        "--severity", parser=Severity.parse, metavar=SEVERITY_METAVAR,
        show_default=Severity.high.name)] = Severity.high,
    details: Annotated[str, typer.Option("--details", metavar="MARKDOWN",
                                         help="Longer description (Markdown).")
                       ] = "",
    alias: Annotated[list[str] | None, typer.Option(
        "--alias", metavar="ID",
        help="Another id of the same issue, e.g. a CVE (repeatable).")] = None,
    reference: Annotated[list[str] | None, typer.Option(
        "--reference", metavar="URL", help="A URL with more information (repeatable).")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="FILE", help="Where to write the advisory (JSON; required).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output file.")
                     ] = False,
) -> None:
    """Write a schema-valid OSV advisory for one engine, Hub repo or PyPI package.

    Example: dflash-guard advisory new --id x_ACME-1 --summary leak --engine URL -o adv.json
    """
    from dflash_guard.audit.author import AdvisorySubject, Events, new_advisory, write_advisory

    written = output
    if written is None:
        raise InputError("give -o/--output FILE: where to write the advisory")
    record = new_advisory(
        advisory_id, AdvisorySubject(engine=engine, hf_repo=hf_repo, pypi=pypi), summary=summary,
        severity=severity, details=details,
        events=Events(tuple(introduced or ()), tuple(fixed or ()), tuple(last_affected or ()),
                      tuple(limit or ())),
        versions=tuple(version or ()), aliases=tuple(alias or ()),
        references=tuple(reference or ()),
    )
    write_advisory(record, written, force=force)
    stderr.print(f"wrote {written} ({advisory_id})", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add `advisory` to `app`."""
    app.add_typer(advisory_app, name="advisory")
