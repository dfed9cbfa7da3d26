"""`dflash-guard gate`: approve a deploy (exit 0) or refuse it with the reason (exit 1)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from dflash_guard.cli.audit_cmd import parse_clones
from dflash_guard.cli.common import OutputFormat, print_json, stdout
from dflash_guard.cli.verify_cmd import parse_roots
from dflash_guard.errors import EXIT_FINDING, EXIT_OK
from dflash_guard.formats.terminal import markup_safe
from dflash_guard.gate import (
    STEPS,
    ApprovalSigning,
    EndpointOverrides,
    GateOptions,
    GateResult,
    run_gate,
)
from dflash_guard.lossless.reference import parse_fault


def render(result: GateResult) -> None:
    """The verdict table: one row per check, then the decision."""
    table = Table(title="dflash-guard gate", title_justify="left")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    ran = {c.name for c in result.checks}
    for check in result.checks:
        if check.skipped:
            verdict = "[dim]not configured[/]"
        else:
            verdict = "[green]pass[/]" if check.ok else "[bold red]FAIL[/]"
        table.add_row(check.name, verdict, markup_safe(check.detail))
    for step in STEPS:
        if step not in ran:
            table.add_row(step, "[dim]not run[/]", "")
    stdout.print(table)
    if result.approved:
        where = f": record {markup_safe(str(result.record))}" if result.record else ""
        signed = f", signed {markup_safe(str(result.signature))}" if result.signature else ""
        stdout.print(f"[bold green]APPROVED[/]{where}{signed}", highlight=False)
    else:
        stdout.print(f"[bold red]REFUSED[/]: {markup_safe(result.reason or '')}", highlight=False,
                     soft_wrap=True)


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
    engine_repo: Annotated[list[str] | None, typer.Option(
        "--engine-repo", help="NAME=PATH: a local git clone of a locked engine (or Hub repo), "
                              "for the advisory audit's GIT ranges (repeatable).")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", help="text or json.")
                   ] = OutputFormat.text,
) -> None:
    """Run every check of a deploy in order; exit 0 approved, 1 refused, 2 usage/input error.

    Example: dflash-guard gate --lock dflash.lock --policy strict --out approval.json
    """
    result = run_gate(GateOptions(
        lock_path, policy, parse_roots(root or []), out=out,
        signing=ApprovalSigning(sigstore=sign, key=key, interactive=sys.stdin.isatty()),
        trust_root=trust_root, download=download, device=device, inject=parse_fault(inject),
        threads=threads, endpoints=EndpointOverrides(baseline, candidate),
        engine_repos=parse_clones(engine_repo or []),
    ))
    if fmt is OutputFormat.json:
        print_json(result.to_json())
    else:
        render(result)
    raise typer.Exit(EXIT_OK if result.approved else EXIT_FINDING)


def register(app: typer.Typer) -> None:
    """Add `gate` to `app`."""
    app.command("gate")(gate)
