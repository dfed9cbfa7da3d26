"""`dflash-guard scan`: scan checkpoints and remote code before anything loads them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from dflash_guard import formats
from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import Json, Quiet, chosen_format
from dflash_guard.formats import OutputFormat, exit_code
from dflash_guard.outputs import refuse_outputs_over_inputs
from dflash_guard.pins.loaded import DeployEngine, deploy_engines
from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity

# The rich consoles of cli.common are imported where used: a clean scan prints without rich.


def register(app: typer.Typer) -> None:
    """Add `scan` to `app`."""

    @app.command("scan")
    def scan(
        paths: Annotated[list[Path], typer.Argument(metavar="PATH",
                                                    help="Files or folders to scan.")],
        target: Annotated[
            Path | None,
            typer.Option("--target", metavar="DIR",
                         help="Target model folder to check a drafter config against."),
        ] = None,
        output_format: Annotated[
            OutputFormat, typer.Option("--format", metavar="[text|json|sarif]",
                                       help="Report format.")
        ] = OutputFormat.text, as_json: Json = False,
        output: Annotated[
            Path | None,
            typer.Option("-o", "--output", metavar="FILE",
                         help="Write the report to FILE (atomically), not stdout."),
        ] = None,
        fail_on: Annotated[
            Severity,
            typer.Option(
                "--fail-on",
                parser=Severity.parse,
                metavar="[" + "|".join(Severity.names()) + "]",
                show_default=Severity.medium.name,
                help="Lowest severity that makes the exit code 1.",
            ),
        ] = Severity.medium,
        reviewed: Annotated[
            list[str] | None,
            typer.Option("--reviewed", metavar="SHA256",
                         help="sha256 of a reviewed code file, chat template or generation config "
                              "(repeatable)."),
        ] = None,
        param_budget: Annotated[
            int | None,
            typer.Option("--param-budget", metavar="N",
                         help="Most parameters a drafter may have (3e9)."),
        ] = None,
        finite_weights: Annotated[
            bool,
            typer.Option("--finite-weights",
                         help="Read every float of the loaded safetensors of each PATH: a NaN "
                              "or an infinity is DG-WEIGHTS-NONFINITE (a drafter's are always "
                              "read)."),
        ] = False,
        upstream: Annotated[
            Path | None,
            typer.Option("--upstream", metavar="DIR",
                         help="The model's upstream folder: each PATH's tokenizer, generation "
                              "and template files are compared with its (default: the catalog "
                              "of published files)."),
        ] = None,
        lock: Annotated[
            Path | None,
            typer.Option("--lock", metavar="LOCK",
                         help="Lockfile whose engines decide which files are loaded (default: "
                              "every engine dflash-guard models)."),
        ] = None,
        quiet: Quiet = False,
    ) -> None:
        """Scan checkpoints, chat templates and remote code; exit 1 on findings at --fail-on+.

        Example: dflash-guard scan pair/drafter --target pair/target --format sarif
        """
        output_format = chosen_format(output_format, as_json)
        refuse_outputs_over_inputs([("--output", output)],
                                   [*(("PATH", Path(p)) for p in paths), ("--target", target),
                                    ("--upstream", upstream), ("--lock", lock)])
        engines: tuple[DeployEngine, ...] = ()
        if lock is not None:
            from dflash_guard.pins.lockfile import load_lockfile

            engines = deploy_engines(load_lockfile(lock))
        with progress(quiet) as shown:
            report = scan_paths(
                paths,
                target=target,
                reviewed_sha256=frozenset(digest.lower() for digest in reviewed or []),
                reviewed_templates=frozenset(digest.lower() for digest in reviewed or []),
                reviewed_files=frozenset(digest.lower() for digest in reviewed or []),
                param_budget=param_budget,
                engines=engines,
                finite_weights=finite_weights,
                upstream_folder=upstream,
                progress=shown,
            )
        report = dataclasses.replace(report, fail_on=fail_on)
        if output is None and output_format is OutputFormat.text and not report.findings:
            typer.echo(formats.render(report, output_format), nl=False)  # plain: rich unloaded
            raise typer.Exit(exit_code(report))
        from dflash_guard.formats.sarif import render as render_sarif
        from dflash_guard.formats.text.findings import print_report

        finish(report, output_format, print_report, output=output, quiet=quiet,
               render_sarif=render_sarif)
