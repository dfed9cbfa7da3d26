"""`dflash-guard bench`: speedup of speculation per concurrency tier, and where it stops paying."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import OutputFormat, print_json, stdout
from dflash_guard.errors import InputError
from dflash_guard.lossless.endpoint.client import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, read_api_key
from dflash_guard.rollout.bench import DEFAULT_MAX_TOKENS, BenchReport


def _render(report: BenchReport) -> None:
    from rich.table import Table

    streamed = any(t.candidate.ttft_p50_s is not None for t in report.tiers)
    table = Table("tier", "tok/s base", "tok/s spec", "speedup", "p50/p95 s base",
                  "p50/p95 s spec", *(["TTFT p50 s base/spec"] if streamed else []), "tau",
                  title="speculation per concurrency tier")
    for tier in report.tiers:
        tau = "n/a" if tier.tau is None else f"{tier.tau:.2f}"
        style = "green" if tier.speedup >= 1 else "red"
        ttft = [f"{tier.baseline.ttft_p50_s or 0:.3f}/{tier.candidate.ttft_p50_s or 0:.3f}"]
        table.add_row(str(tier.concurrency), f"{tier.baseline.tokens_per_s:.1f}",
                      f"{tier.candidate.tokens_per_s:.1f}", f"[{style}]{tier.speedup:.2f}x[/]",
                      f"{tier.baseline.latency_p50_s:.2f}/{tier.baseline.latency_p95_s:.2f}",
                      f"{tier.candidate.latency_p50_s:.2f}/{tier.candidate.latency_p95_s:.2f}",
                      *(ttft if streamed else []), tau)
    stdout.print(table)
    crossover = report.crossover
    stdout.print("speculation pays at every tier" if crossover is None else
                 f"crossover: speculation is slower from concurrency {crossover}",
                 highlight=False, markup=False)


def bench(
    baseline: Annotated[str, typer.Option(
        "--baseline", help="The engine without speculation (OpenAI-compatible base URL).")],
    candidate: Annotated[str, typer.Option(
        "--candidate", help="The same engine with speculation.")],
    concurrency: Annotated[str, typer.Option(
        "--concurrency", help="Comma-separated concurrency tiers.")] = "1,2,4,8",
    prompts: Annotated[Path | None, typer.Option(
        "--prompts", help="JSONL prompt set (default: the built-in one).")] = None,
    requests: Annotated[int | None, typer.Option(
        "--requests", min=1, help="Requests per tier and endpoint (default: 2 x tier, >= 4).")
    ] = None,
    duration: Annotated[float | None, typer.Option(
        "--duration", min=0.001, help="Seconds per tier and endpoint (instead of --requests).")
    ] = None,
    max_tokens: Annotated[int, typer.Option(
        "--max-tokens", min=1, help="Output budget of each request.")] = DEFAULT_MAX_TOKENS,
    model: Annotated[str | None, typer.Option(
        "--model", help="Model name (default: the first each server lists).")] = None,
    metrics: Annotated[str | None, typer.Option(
        "--metrics", help="The candidate's Prometheus endpoint, for its tau per tier "
                          "(default: /metrics at the candidate's origin).")] = None,
    no_metrics: Annotated[bool, typer.Option(
        "--no-metrics", help="Do not read the candidate's tau.")] = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=0.001, help="Per-request timeout in seconds.")] = DEFAULT_TIMEOUT_S,
    retries: Annotated[int, typer.Option(
        "--retries", min=0, help="Retries on HTTP 429/503.")] = DEFAULT_RETRIES,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", help="Environment variable holding the API key.")] = None,
    stream: Annotated[bool, typer.Option(
        "--stream", help="Stream the answers and report the time to the first token.")
    ] = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="Draw speedup and tau against concurrency (.png or .svg; needs "
                       "matplotlib).")] = None,
    output_format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.text,
) -> None:
    """Benchmark an engine with and without speculation at each concurrency tier.

    Example: dflash-guard bench --baseline http://h:8000 --candidate http://h:8001 --plot b.svg
    """
    from dflash_guard.gate import metrics_url
    from dflash_guard.lossless.defaults import DEFAULT_PROMPTS
    from dflash_guard.lossless.prompts import read_prompts
    from dflash_guard.rollout.bench import BenchOptions, parse_tiers, run_bench

    if requests is not None and duration is not None:
        raise InputError("give either --requests or --duration, not both")
    options = BenchOptions(
        baseline, candidate, tuple(read_prompts(prompts or DEFAULT_PROMPTS)),
        tiers=parse_tiers(concurrency), requests=requests, duration_s=duration,
        max_tokens=max_tokens, model=model,
        metrics_url=None if no_metrics else metrics or metrics_url(candidate),
        timeout=timeout, retries=retries, api_key=read_api_key(api_key_env),
        stream=stream,
    )
    if plot is not None:
        from dflash_guard.rollout.plot import check_plot_target

        check_plot_target(plot)
    report = run_bench(options)
    if plot is not None:
        from dflash_guard.rollout.plot import plot_report

        plot_report(report, plot)
    if output_format is OutputFormat.json:
        print_json(report.to_json())
    else:
        _render(report)


def register(app: typer.Typer) -> None:
    """Add `bench` to `app`."""
    app.command("bench")(bench)
