"""`dflash-guard difftest`: greedy speculative output must equal the target's own greedy output."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from dflash_guard.cli.common import OutputFormat, print_json, stderr, stdout
from dflash_guard.difftest import DifftestReport, run_difftest
from dflash_guard.errors import EXIT_FINDING, EXIT_OK
from kernels_ref.loop import FAULTS


def _token(token: int | None) -> str:
    return "<end of output>" if token is None else str(token)


def render_text(report: DifftestReport) -> None:
    """Print a per-prompt table, each divergence, the acceptance summary and warnings."""
    table = Table(title=f"difftest (block size {report.block_size})")
    for column in ("prompt", "identical", "tau", "steps", "target forwards AR/spec"):
        table.add_column(column, no_wrap=True)
    for r in report.results:
        table.add_row(
            r.id,
            "yes" if r.identical else "[red]NO[/]",
            f"{r.tau:.2f}",
            str(r.steps),
            f"{r.target_forwards_ar}/{r.target_forwards_spec}",
        )
    stdout.print(table)
    for r in report.divergences:
        margin = "" if r.top2_margin is None else f", target top-2 margin {r.top2_margin:g}"
        tie = " (likely numerical near-tie)" if r.near_tie else ""
        stdout.print(
            f"[red]divergence[/] {r.id}: first at generated token {r.first_diff_position}: "
            f"autoregressive {_token(r.ar_token)}, speculative {_token(r.spec_token)}{margin}{tie}",
            highlight=False,
        )
    histogram = " ".join(f"{k}:{v}" for k, v in report.histogram.items())
    stdout.print(f"tau {report.tau:.2f}   histogram {histogram}")
    saved = report.target_forwards_ar - report.target_forwards_spec
    stdout.print(
        f"target forwards: {report.target_forwards_ar} autoregressive, "
        f"{report.target_forwards_spec} speculative ({saved} saved)"
    )
    if report.inject:
        stdout.print(f"injected fault: {report.inject} ({FAULTS[report.inject]})")
    for warning in report.warnings:
        stdout.print(f"[yellow]warning:[/] {warning}", highlight=False)
    verdict = (
        "[green]identical[/]"
        if report.identical
        else (f"[red]DIVERGED[/] on {len(report.divergences)} of {len(report.results)} prompts")
    )
    stdout.print(f"verdict: {verdict}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command("difftest")
    def difftest(
        target: Annotated[Path, typer.Option("--target", help="Target model folder (HF layout).")],
        drafter: Annotated[
            Path, typer.Option("--drafter", help="DFlash drafter folder (HF layout).")
        ],
        prompts: Annotated[
            Path | None, typer.Option(help="JSONL prompt set (default: the shipped set).")
        ] = None,
        max_new_tokens: Annotated[
            int | None, typer.Option(min=1, help="Token budget (caps per-prompt budgets).")
        ] = None,
        block_size: Annotated[
            int | None, typer.Option(min=1, help="Draft block size (default: the drafter's).")
        ] = None,
        device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
        dtype: Annotated[str, typer.Option(help="float32, float64, bfloat16.")] = "float32",
        inject: Annotated[
            str | None, typer.Option(help="Plant a known engine bug: " + ", ".join(FAULTS) + ".")
        ] = None,
        cuda_graphs: Annotated[
            bool, typer.Option(help="Replay decode/verify/draft steps as CUDA graphs (cuda).")
        ] = False,
        fail_on_warning: Annotated[
            bool, typer.Option(help="Exit 1 on an acceptance warning too.")
        ] = False,
        output_format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.text,
    ) -> None:
        """Diff-test losslessness: speculative vs autoregressive greedy decoding, token for token.

        Exit 0 identical, 1 divergence (or a warning with --fail-on-warning), 2 input error.
        """
        if output_format is OutputFormat.text:
            stderr.print(f"diff-testing {drafter} against {target} ...")
        report = run_difftest(
            target,
            drafter,
            prompts=prompts,
            max_new_tokens=max_new_tokens,
            device=device,
            dtype=dtype,
            inject=inject,
            block_size=block_size,
            cuda_graphs=cuda_graphs,
        )
        if output_format is OutputFormat.json:
            print_json(report.to_json())
        else:
            render_text(report)
        failed = not report.identical or (fail_on_warning and bool(report.warnings))
        raise typer.Exit(EXIT_FINDING if failed else EXIT_OK)
