"""`dflash-guard lock` and `dflash-guard export requirements`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import Json, LockPath, Quiet, chosen_format
from dflash_guard.errors import InputError
from dflash_guard.fileio import write_atomic
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text.lock import render_lock
from dflash_guard.outputs import refuse_outputs_over_inputs, refuse_unwritable
from dflash_guard.pins.hub import cached_snapshot
from dflash_guard.pins.lockfile import UPSTREAM, load_lockfile, write_lockfile
from dflash_guard.pins.resolve import LockReport, build_lock, requirements_text
from dflash_guard.pins.roles import refuse_swapped_roles

export_app = typer.Typer(help="Export parts of a lockfile.", no_args_is_help=True)


def lock(
    target: Annotated[
        str, typer.Option("--target", metavar="SOURCE",
                          help="ORG/NAME\\[@REV], an HF-cache snapshot or a folder.")
    ],
    drafter: Annotated[
        str, typer.Option("--drafter", metavar="SOURCE",
                          help="ORG/NAME\\[@REV], an HF-cache snapshot or a folder.")
    ],
    gguf: Annotated[
        str | None, typer.Option("--gguf", metavar="SOURCE",
                                 help="Optional GGUF source, same forms.")
    ] = None,
    upstream: Annotated[
        list[str] | None, typer.Option(
            "--upstream", metavar="ROLE=SOURCE",
            help="The upstream of the target or drafter (same forms), repeatable: its "
                 "tokenizer, generation and template files are locked to compare with "
                 "(the policy's `upstream:` names it).")
    ] = None,
    engine: Annotated[
        list[str] | None, typer.Option("--engine", metavar="NAME=URL@SHA",
                                       help="NAME=GIT_URL@SHA40\\[#REF], repeatable.")
    ] = None,
    package: Annotated[
        list[str] | None,
        typer.Option(
            "--package", metavar="SPEC",
            help="NAME==VERSION@sha256:HEX|FILE\\[,...] or a wheel path, repeatable."
        ),
    ] = None,
    output: Annotated[Path, typer.Option("-o", "--output", metavar="FILE",
                                         help="Lockfile to write.")] = Path(
        "dflash.lock"
    ),
    confirmed_by: Annotated[Path | None, typer.Option(
        "--confirmed-by", metavar="LOCK",
        help="An earlier lock made online and signed by a lockfile signer of --policy: "
             "HF-cache snapshots it lists (same repo, commit and exactly its files) are "
             "recorded hub-confirmed instead of cache-unconfirmed.")] = None,
    policy: Annotated[str | None, typer.Option(
        "--policy", metavar="POLICY",
        help="With --confirmed-by: the policy whose lockfile signers the earlier "
             "lock's signature must verify against.")] = None,
    trust_root: Annotated[Path | None, typer.Option(
        "--trust-root", "--trusted-root", metavar="JSON",
        help="Sigstore trusted root (JSON) for offline verification.")] = None,
    fmt: Annotated[
        PlainFormat, typer.Option("--format", metavar="[text|json]", help="text or json.")
    ] = PlainFormat.text, as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Pin target, drafter (and gguf) revisions, engine SHAs and package hashes into a lockfile.

    A Hub repo is ORG/NAME@COMMIT, with the full 40-hex commit.
    ORG/NAME alone locks `main`, which the default and strict policies refuse.

    Example: dflash-guard lock --target pair/target --drafter pair/drafter -o dflash.lock
    """
    fmt = chosen_format(fmt, as_json)
    refuse_unwritable([("-o", output)])
    sources = {"target": target, "drafter": drafter}
    if gguf:
        sources["gguf"] = gguf
    for spec in upstream or []:
        role, sep, source = spec.partition("=")
        if not sep or f"{role}-upstream" not in UPSTREAM or not source:
            raise InputError(f"--upstream {spec!r}: expected ROLE=SOURCE with ROLE target or "
                             "drafter")
        if f"{role}-upstream" in sources:
            raise InputError(f"--upstream {role}=: given twice")
        sources[f"{role}-upstream"] = source
    refuse_swapped_roles({role: Path(src).expanduser() for role, src in sources.items()
                          if Path(src).expanduser().is_dir()})
    refuse_outputs_over_inputs(
        [("-o", output)],
        [("--confirmed-by", confirmed_by),
         *((f"--{role}", Path(src).expanduser()) for role, src in sources.items()
           if Path(src).expanduser().exists()),
         *(("--package", Path(spec).expanduser()) for spec in package or []
           if Path(spec).expanduser().is_file())],
    )
    earlier = None
    if confirmed_by is None and (policy is not None or trust_root is not None):
        raise InputError("--policy and --trust-root apply with --confirmed-by (whose signature "
                         "they check)")
    if confirmed_by is not None:
        from dflash_guard.trust.evidence import load_confirming_lock
        from dflash_guard.trust.policy import load_policy

        earlier = load_confirming_lock(confirmed_by, load_policy(policy).lockfile_signers,
                                       trust_root=trust_root)
    with progress(quiet) as shown:
        result = build_lock(sources, engine or [], package or [], confirmed_by=earlier,
                            progress=shown)
    if result.warnings:
        from dflash_guard.cli.common import stderr

        for warning in result.warnings:
            stderr.print(f"warning: {warning}", highlight=False, markup=False)
    if result.lock is not None:  # a Hub snapshot's roles are known once it is fetched
        refuse_swapped_roles({a.role: snapshot for a in result.lock.artifacts
                              if a.source == "hub" and a.repo and a.commit
                              and (snapshot := cached_snapshot(a.repo, a.commit)) is not None})
        write_lockfile(result.lock, output)
    finish(LockReport(result.outcome, output, result.lock), fmt, render_lock)


@export_app.command("requirements")
def export_requirements(
    lock_path: LockPath = Path("dflash.lock"),
    output: Annotated[
        Path | None, typer.Option("-o", "--output", metavar="FILE",
                                  help="File to write (default stdout).")
    ] = None,
) -> None:
    """Write a pip --require-hashes requirements file for the locked packages.

    Example: dflash-guard export requirements --lock lockfiles/release.lock -o release.txt
    """
    refuse_outputs_over_inputs([("-o", output)], [("--lock", lock_path)])
    text = requirements_text(load_lockfile(lock_path))
    if output is not None and not output.parent.is_dir():
        raise InputError(f"-o {output}: folder {output.parent} does not exist")
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_atomic(output, text)


def register(app: typer.Typer) -> None:
    """Add `lock` and `export requirements` to `app`."""
    app.command("lock")(lock)
    app.add_typer(export_app, name="export")
