"""`dflash-guard difftest`: speculative output must equal the target's own (five modes).

Over 450 lines: the five modes share one command whose signature lists every flag, and each
mode's renderer sits next to it.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from dflash_guard.cli.common import OutputFormat, print_json, stderr, stdout
from dflash_guard.errors import EXIT_FINDING, EXIT_OK, InputError
from dflash_guard.lossless.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_PROMPTS,
    DEFAULT_RUNNER_SAMPLES,
    DEFAULT_RUNNER_TOKENS,
)
from dflash_guard.lossless.endpoint import (
    DEFAULT_NEAR_TIE_MARGIN,
    DEFAULT_TIMEOUT_S,
    EndpointDiffReport,
    EndpointOptions,
    read_api_key,
    run_endpoint_diff,
)
from dflash_guard.lossless.isolation import IsolationOptions, IsolationReport, run_isolation_diff
from dflash_guard.lossless.options import LocalOptions, ReferenceOptions, SampledOptions
from dflash_guard.lossless.prompts import read_prompts
from dflash_guard.lossless.reference import parse_fault
from dflash_guard.lossless.result import Token
from kernels_ref.faults import Fault

if TYPE_CHECKING:  # the local and sampled modes load torch only when they run
    from dflash_guard.lossless.local import DifftestReport
    from dflash_guard.lossless.reference_diff import ReferenceDiffReport
    from dflash_guard.lossless.sampled import SampledReport


def _token(token: Token | None) -> str:
    return "<end of output>" if token is None else str(token)


def render_text(report: DifftestReport) -> None:
    """Print a per-prompt table, each divergence, the acceptance summary and warnings."""
    table = Table(title=f"difftest (block size {report.block_size})")
    for column in ("prompt", "identical", "tau", "steps", "target forwards AR/spec"):
        table.add_column(column, no_wrap=True)
    for r in report.results:
        stats = r.speculation
        assert stats is not None  # the local diff always speculates
        table.add_row(
            r.prompt_id,
            "yes" if r.identical else "[red]NO[/]",
            f"{stats.tau:.2f}",
            str(stats.steps),
            f"{stats.target_forwards_ar}/{stats.target_forwards_spec}",
        )
    stdout.print(table)
    for r in report.divergences:
        d = r.divergence
        assert d is not None
        margin = "" if d.margin is None else f", target top-2 margin {d.margin:g}"
        tie = " (likely numerical near-tie)" if d.near_tie else ""
        stdout.print(
            f"[red]divergence[/] {r.prompt_id}: first at generated token {d.position}: "
            f"autoregressive {_token(d.reference_token)}, "
            f"speculative {_token(d.candidate_token)}{margin}{tie}",
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
        stdout.print(f"injected fault: {report.inject} ({report.inject.description})")
    for warning in report.warnings:
        stdout.print(f"[yellow]warning:[/] {warning}", highlight=False)
    verdict = (
        "[green]identical[/]"
        if report.identical
        else (f"[red]DIVERGED[/] on {len(report.divergences)} of {len(report.results)} prompts")
    )
    stdout.print(f"verdict: {verdict}")


def render_endpoint(report: EndpointDiffReport) -> None:
    """Print the endpoint diff: one row per prompt that is not identical, acceptance, verdict."""
    stdout.print(f"baseline {report.baseline}  vs  candidate {report.candidate}")
    table = Table(title=f"endpoint difftest ({len(report.results)} prompts)")
    for column in ("prompt", "status", "by", "position", "baseline", "candidate", "margin"):
        table.add_column(column)
    for r in report.results:
        d = r.divergence
        if d is None:
            continue
        margin = "" if d.margin is None else f"{d.margin:.4f}"
        colour = "yellow" if d.near_tie else "red"
        table.add_row(r.prompt_id, f"[{colour}]{r.status}[/]", r.compared_by, str(d.position),
                      repr(d.reference_token), repr(d.candidate_token), margin)
    if table.row_count:
        stdout.print(table)
    if report.acceptance is not None:
        a = report.acceptance
        tau = "n/a" if a.mean_acceptance_length is None else f"{a.mean_acceptance_length:.2f}"
        rate = "n/a" if a.acceptance_rate is None else f"{a.acceptance_rate:.3f}"
        stdout.print(f"candidate acceptance ({a.source}): tau {tau}, acceptance rate {rate}")
        if a.acceptance_curve:
            curve = " ".join(f"{share:.2f}" for share in a.acceptance_curve)
            stdout.print(f"acceptance by draft position: {curve}", highlight=False)
    if report.response_drafts is not None:
        d = report.response_drafts
        stdout.print(f"responses report {d.accepted_tokens} of {d.draft_tokens} drafted tokens "
                     f"accepted ({d.responses} responses)", highlight=False)
    for warning in report.warnings:
        stdout.print(f"[yellow]warning:[/] {warning}", highlight=False)
    hard, ties = len(report.hard_divergences), len(report.near_ties)
    if report.identical:
        verdict = "[green]identical[/]"
    elif report.passed:
        verdict = f"[yellow]{ties} near-tie(s)[/], no hard divergence"
    else:
        verdict = f"[red]DIVERGED[/]: {hard} hard, {ties} near-tie(s)"
    stdout.print(f"verdict: {verdict}")


def render_isolation(report: IsolationReport) -> None:
    """Print the isolation diff: each prompt whose concurrent output left its solo run, verdict."""
    stdout.print(f"candidate {report.candidate}: {len(report.results)} prompts alone, then among "
                 f"{report.tenants} prefix-sharing tenants at concurrency {report.concurrency}",
                 highlight=False)
    for r in report.results:
        d = r.divergence
        if d is None:
            continue
        margin = "" if d.margin is None else f", solo top-2 margin {d.margin:.4f}"
        stdout.print(f"[{'yellow' if d.near_tie else 'red'}]{r.status}[/] {r.prompt_id}: first "
                     f"at generated token {d.position}: alone {_token(d.reference_token)}, "
                     f"among tenants {_token(d.candidate_token)}{margin}", highlight=False)
    hard, ties = len(report.hard_divergences), len(report.near_ties)
    if report.identical:
        verdict = "[green]identical[/]: no output depends on another request"
    elif report.passed:
        verdict = f"[yellow]{ties} near-tie(s)[/], no hard divergence"
    else:
        verdict = f"[red]NOT ISOLATED[/]: {hard} hard, {ties} near-tie(s)"
    stdout.print(f"verdict: {verdict}")


def render_reference(report: ReferenceDiffReport) -> None:
    """Print the engine-vs-reference diff: a refusal, or each divergence, then the verdict."""
    stdout.print(f"reference {report.target} (kernels_ref)  vs  engine {report.candidate}",
                 highlight=False)
    if report.refused is not None:
        stdout.print(f"[red]refused before any diff:[/] {report.refused}", highlight=False)
        return
    for r in report.results:
        d = r.divergence
        if d is None:
            continue
        margin = "" if d.margin is None else f", reference top-2 margin {d.margin:.4f}"
        stdout.print(f"[{'yellow' if d.near_tie else 'red'}]{r.status}[/] {r.prompt_id}: first "
                     f"at generated token {d.position}: reference {_token(d.reference_token)}, "
                     f"engine {_token(d.candidate_token)}{margin}", highlight=False)
    if report.response_drafts is not None:
        d = report.response_drafts
        stdout.print(f"engine responses report {d.accepted_tokens} of {d.draft_tokens} drafted "
                     "tokens accepted", highlight=False)
    for warning in report.warnings:
        stdout.print(f"[yellow]warning:[/] {warning}", highlight=False)
    hard, ties = len(report.hard_divergences), len(report.near_ties)
    verdict = {"identical": "[green]identical[/]",
               "near-ties": f"[yellow]{ties} near-tie(s)[/], no hard divergence",
               "diverged": f"[red]DIVERGED[/]: {hard} hard, {ties} near-tie(s)"}[report.verdict]
    stdout.print(f"verdict: {verdict} ({len(report.results)} prompts)")


def run_reference_mode(options: ReferenceOptions, record: Path | None,
                       output_format: OutputFormat) -> int:
    """Run the engine-vs-reference diff, write its record if asked, render; the exit code."""
    from dflash_guard.lossless.reference_diff import run_reference_diff, write_reference_record

    if record is not None and not record.parent.is_dir():
        raise InputError(f"--record {record}: folder {record.parent} does not exist")
    if output_format is OutputFormat.text:
        stderr.print(f"decoding with kernels_ref from {options.target} and with the engine ...")
    report = run_reference_diff(options)
    if record is not None:
        write_reference_record(options, report, record)
    if output_format is OutputFormat.json:
        print_json({**report.to_json(), "record": str(record) if record else None})
    else:
        render_reference(report)
        if record is not None:
            stdout.print(f"wrote {record}", highlight=False, markup=False)
    return EXIT_OK if report.passed else EXIT_FINDING


def render_sampled(report: SampledReport) -> None:
    """Print the sampled check: one row per prompt, then the verdict."""
    table = Table(title=f"sampled exactness ({report.samples} draws x {report.tokens} tokens, "
                  f"alpha {report.alpha}: {report.per_test_alpha:.2g} per test)")
    for column in ("prompt", "joint chi2", "dof", "min p-value", "accepted/step", "verdict"):
        table.add_column(column)
    for r in report.results:
        accepted = "" if r.mean_accepted is None else f"{r.mean_accepted:.2f}"
        table.add_row(r.prompt_id, f"{r.test.statistic:.1f}", str(r.test.dof),
                      f"{r.p_value:.3g}", accepted,
                      "[red]biased[/]" if r.rejected else "ok")
    stdout.print(table)
    stdout.print("verdict: " + ("[green]consistent with exact sampling[/]" if report.passed
                                else "[red]speculative sampling is biased[/]"))


class Mode(StrEnum):
    """The five kinds of diff test; each accepts only its own flags."""

    local = "local"
    sampled = "sampled"
    endpoint = "endpoint"
    reference = "reference"
    isolation = "isolation"


COMMON_FLAGS = frozenset({"prompts", "output_format"})
MODE_FLAGS: dict[Mode, frozenset[str]] = {
    Mode.local: COMMON_FLAGS | {"target", "drafter", "max_new_tokens", "block_size", "device",
                                "dtype", "inject", "cuda_graphs", "fail_on_warning"},
    Mode.sampled: COMMON_FLAGS | {"target", "drafter", "sampled", "samples", "sample_tokens",
                                  "temperature", "top_k", "top_p", "alpha", "seed", "inject",
                                  "block_size", "device", "dtype"},
    Mode.endpoint: COMMON_FLAGS | {"baseline", "candidate", "model", "max_new_tokens",
                                   "concurrency", "api_key_env", "metrics", "near_tie_margin",
                                   "timeout", "token_ids", "fail_on_warning"},
    Mode.reference: COMMON_FLAGS | {"reference", "candidate", "gguf", "conversion", "record",
                                    "model", "max_new_tokens", "concurrency", "api_key_env",
                                    "metrics", "near_tie_margin", "timeout", "dtype"},
    Mode.isolation: COMMON_FLAGS | {"isolation", "candidate", "model", "max_new_tokens",
                                    "concurrency", "api_key_env", "near_tie_margin", "timeout",
                                    "token_ids"},
}


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the user set parameter `name` (typer vendors click, so compare sources by name)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _mode(ctx: typer.Context) -> Mode:
    """The mode the flags ask for; `InputError` for a flag that does not apply to it."""
    given = [param for param in ctx.command.params if param.name and _given(ctx, param.name)]
    names = {param.name for param in given}
    if "isolation" in names and ctx.params["isolation"]:
        mode = Mode.isolation
    elif "reference" in names:
        mode = Mode.reference
    elif names & {"baseline", "candidate"}:
        mode = Mode.endpoint
    elif "sampled" in names and ctx.params["sampled"]:
        mode = Mode.sampled
    else:
        mode = Mode.local
    if mode in (Mode.endpoint, Mode.isolation) and "inject" in names:
        raise InputError("--inject plants bugs in the reference runner: start "
                         "`python -m kernels_ref.serve --inject` for an endpoint")
    for param in given:
        if param.name not in MODE_FLAGS[mode]:
            flag = param.opts[0] if param.opts else param.name
            owners = " and ".join(m for m in Mode if param.name in MODE_FLAGS[m])
            raise InputError(f"{flag} applies to {owners} mode, not to {mode} mode")
    return mode


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command("difftest")
    def difftest(
        ctx: typer.Context,
        target: Annotated[
            Path | None, typer.Option("--target", help="Target model folder (HF layout).")
        ] = None,
        drafter: Annotated[
            Path | None, typer.Option("--drafter", help="DFlash drafter folder (HF layout).")
        ] = None,
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
            str | None,
            typer.Option(
                help="Plant a known engine bug: " + ", ".join(f for f in Fault if f.greedy)
                + " (with --sampled: " + ", ".join(f for f in Fault if f.sampling) + ")."
            ),
        ] = None,
        cuda_graphs: Annotated[
            bool, typer.Option(help="Replay decode/verify/draft steps as CUDA graphs (cuda).")
        ] = False,
        fail_on_warning: Annotated[
            bool, typer.Option(help="Exit 1 on an acceptance warning too.")
        ] = False,
        output_format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.text,
        baseline: Annotated[
            str | None,
            typer.Option(help="Endpoint mode: URL of the engine without speculation.",
                         rich_help_panel="Endpoint mode"),
        ] = None,
        candidate: Annotated[
            str | None,
            typer.Option(help="Endpoint mode: URL of the engine with the DFlash drafter.",
                         rich_help_panel="Endpoint mode"),
        ] = None,
        model: Annotated[
            str | None,
            typer.Option(help="Served model name (default: each server's first model).",
                         rich_help_panel="Endpoint mode"),
        ] = None,
        concurrency: Annotated[
            int, typer.Option(min=1, help="Prompts in flight.", rich_help_panel="Endpoint mode")
        ] = 4,
        api_key_env: Annotated[
            str | None,
            typer.Option(help="Environment variable holding the API key (never printed).",
                         rich_help_panel="Endpoint mode"),
        ] = None,
        metrics: Annotated[
            str | None,
            typer.Option(help="The candidate's Prometheus /metrics URL (acceptance figures).",
                         rich_help_panel="Endpoint mode"),
        ] = None,
        near_tie_margin: Annotated[
            float,
            typer.Option(min=0.0, help="Top-2 logprob margin (nats) under which a divergence "
                         "to the runner-up is a near-tie.", rich_help_panel="Endpoint mode"),
        ] = DEFAULT_NEAR_TIE_MARGIN,
        timeout: Annotated[
            float,
            typer.Option(min=0.001, help="Per-request timeout in seconds.",
                         rich_help_panel="Endpoint mode"),
        ] = DEFAULT_TIMEOUT_S,
        token_ids: Annotated[
            bool,
            typer.Option(help="Ask for token ids (vLLM fields); --no-token-ids for plain OpenAI.",
                         rich_help_panel="Endpoint mode"),
        ] = True,
        reference: Annotated[
            Path | None,
            typer.Option(help="Reference mode: the safetensors target folder kernels_ref decodes; "
                         "--candidate is the engine.", rich_help_panel="Reference mode"),
        ] = None,
        gguf: Annotated[
            Path | None,
            typer.Option(help="The GGUF the engine serves (tokenizer check, record subject).",
                         rich_help_panel="Reference mode"),
        ] = None,
        conversion: Annotated[
            Path | None,
            typer.Option(help="Its conversion record (default: GGUF.conversion.json if present).",
                         rich_help_panel="Reference mode"),
        ] = None,
        record: Annotated[
            Path | None,
            typer.Option(help="Write the GGUF comparison record (in-toto) here.",
                         rich_help_panel="Reference mode"),
        ] = None,
        isolation: Annotated[
            bool,
            typer.Option("--isolation", help="Decode each prompt on --candidate alone, then among "
                         "other tenants' concurrent, prefix-sharing requests: outputs must match.",
                         rich_help_panel="Isolation mode"),
        ] = False,
        sampled: Annotated[
            bool,
            typer.Option("--sampled", help="Check sampled decoding statistically (reference "
                         "runner).", rich_help_panel="Sampled mode"),
        ] = False,
        samples: Annotated[
            int, typer.Option(min=1, help="Draws per prompt and side.",
                              rich_help_panel="Sampled mode")
        ] = DEFAULT_RUNNER_SAMPLES,
        sample_tokens: Annotated[
            int, typer.Option(min=1, help="Tokens per draw compared jointly.",
                              rich_help_panel="Sampled mode")
        ] = DEFAULT_RUNNER_TOKENS,
        temperature: Annotated[
            float, typer.Option(min=0.0, rich_help_panel="Sampled mode")
        ] = 1.0,
        top_k: Annotated[int | None, typer.Option(min=1, rich_help_panel="Sampled mode")] = None,
        top_p: Annotated[
            float | None, typer.Option(min=0.0, max=1.0, rich_help_panel="Sampled mode")
        ] = None,
        alpha: Annotated[
            float, typer.Option(help="Family-wise false-alarm rate.",
                                rich_help_panel="Sampled mode")
        ] = DEFAULT_ALPHA,
        seed: Annotated[int, typer.Option(rich_help_panel="Sampled mode")] = 0,
    ) -> None:
        """Diff-test losslessness: speculative vs autoregressive decoding, token for token.

        Local mode (--target, --drafter) runs the reference runner; endpoint mode (--baseline,
        --candidate) diffs two live OpenAI-compatible engines; reference mode (--reference,
        --candidate) diffs an engine against kernels_ref on the safetensors target (--record
        writes the GGUF comparison record); --isolation --candidate checks that an engine's output
        does not depend on its other requests; --sampled checks sampled decoding statistically. A
        flag of another mode is refused. Exit 0 identical (endpoint, reference: no hard
        divergence; sampled: no rejection), 1 divergence, a refused GGUF (or a warning with
        --fail-on-warning), 2 input or endpoint error.

        Example: dflash-guard difftest --target demo-out/target --drafter demo-out/drafter
        """
        mode = _mode(ctx)
        if mode is Mode.isolation:
            if candidate is None:
                raise InputError("isolation mode needs --candidate (the engine's URL)")
            isolation_options = IsolationOptions(
                candidate, model=model, max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS,
                concurrency=concurrency, api_key=read_api_key(api_key_env), timeout=timeout,
                near_tie_margin=near_tie_margin, token_ids=token_ids,
            )
            isolation_report = run_isolation_diff(
                isolation_options, read_prompts(prompts or DEFAULT_PROMPTS))
            if output_format is OutputFormat.json:
                print_json(isolation_report.to_json())
            else:
                render_isolation(isolation_report)
            raise typer.Exit(EXIT_OK if isolation_report.passed else EXIT_FINDING)
        if mode is Mode.reference:
            assert reference is not None
            if candidate is None:
                raise InputError("reference mode needs --candidate (the engine's URL)")
            reference_options = ReferenceOptions(
                reference, candidate, gguf=gguf, conversion=conversion, prompts=prompts,
                model=model, max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS,
                concurrency=concurrency, api_key=read_api_key(api_key_env), timeout=timeout,
                near_tie_margin=near_tie_margin, metrics_url=metrics, dtype=dtype,
            )
            raise typer.Exit(run_reference_mode(reference_options, record, output_format))
        if mode is Mode.endpoint:
            if baseline is None or candidate is None:
                raise InputError("endpoint mode needs both --baseline and --candidate")
            options = EndpointOptions(
                baseline,
                candidate,
                model=model,
                max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS,
                concurrency=concurrency,
                api_key=read_api_key(api_key_env),
                timeout=timeout,
                near_tie_margin=near_tie_margin,
                metrics_url=metrics,
                token_ids=token_ids,
            )
            report = run_endpoint_diff(options, read_prompts(prompts or DEFAULT_PROMPTS,
                                                             chat=True))
            if output_format is OutputFormat.json:
                print_json(report.to_json())
            else:
                render_endpoint(report)
            failed = not report.passed or (fail_on_warning and bool(report.warnings))
            raise typer.Exit(EXIT_FINDING if failed else EXIT_OK)
        if target is None or drafter is None:
            raise InputError("give --target and --drafter (or --baseline and --candidate)")
        fault = parse_fault(inject)
        if mode is Mode.sampled:
            sampled_options = SampledOptions(
                target, drafter, prompts=prompts, samples=samples, sample_tokens=sample_tokens,
                temperature=temperature, top_k=top_k, top_p=top_p, alpha=alpha, seed=seed,
                inject=fault, block_size=block_size, device=device, dtype=dtype,
            )
            from dflash_guard.lossless.sampled import run_sampled_difftest

            if output_format is OutputFormat.text:
                stderr.print(f"sampling {samples} draws per prompt and side ...")
            sampled_report = run_sampled_difftest(sampled_options)
            if output_format is OutputFormat.json:
                print_json(sampled_report.to_json())
            else:
                render_sampled(sampled_report)
            raise typer.Exit(EXIT_OK if sampled_report.passed else EXIT_FINDING)
        local_options = LocalOptions(
            target, drafter, prompts=prompts, max_new_tokens=max_new_tokens,
            block_size=block_size, device=device, dtype=dtype, inject=fault,
            cuda_graphs=cuda_graphs,
        )
        from dflash_guard.lossless.local import run_difftest

        if output_format is OutputFormat.text:
            stderr.print(f"diff-testing {drafter} against {target} ...")
        report = run_difftest(local_options)
        if output_format is OutputFormat.json:
            print_json(report.to_json())
        else:
            render_text(report)
        failed = not report.identical or (fail_on_warning and bool(report.warnings))
        raise typer.Exit(EXIT_FINDING if failed else EXIT_OK)
