"""`dflash-guard bench`: speedup of speculation per concurrency tier, and where it stops paying."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import Json, Quiet, chosen_format
from dflash_guard.errors import InputError
from dflash_guard.formats import PlainFormat
from dflash_guard.lossless.defaults import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S
from dflash_guard.rollout.bench import DEFAULT_MAX_TOKENS


def bench(
    baseline: Annotated[str, typer.Option(
        "--baseline", metavar="URL",
        help="The engine without speculation (OpenAI-compatible base URL).")],
    candidate: Annotated[str, typer.Option(
        "--candidate", metavar="URL", help="The same engine with speculation.")],
    concurrency: Annotated[str, typer.Option(
        "--concurrency", metavar="N,N,...", help="Comma-separated concurrency tiers.")] = "1,2,4,8",
    prompts: Annotated[Path | None, typer.Option(
        "--prompts", metavar="JSONL", help="JSONL prompt set (default: the built-in one).")] = None,
    requests: Annotated[int | None, typer.Option(
        "--requests", metavar="N", min=1,
        help="Requests per tier and endpoint (default: 2 x tier, >= 4).")
    ] = None,
    duration: Annotated[float | None, typer.Option(
        "--duration", metavar="SECONDS", min=0.001,
        help="Seconds per tier and endpoint (instead of --requests).")
    ] = None,
    max_tokens: Annotated[int, typer.Option(
        "--max-tokens", metavar="N", min=1,
        help="Output budget of each request.")] = DEFAULT_MAX_TOKENS,
    model: Annotated[str | None, typer.Option(
        "--model", metavar="NAME",
        help="Model name (default: the first each server lists).")] = None,
    metrics: Annotated[str | None, typer.Option(
        "--metrics", metavar="URL",
        help="The candidate's Prometheus endpoint, for its tau per tier "
             "(default: /metrics at the candidate's origin).")] = None,
    no_metrics: Annotated[bool, typer.Option(
        "--no-metrics", help="Do not read the candidate's tau.")] = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", metavar="SECONDS", min=0.001,
        help="Per-request timeout in seconds.")] = DEFAULT_TIMEOUT_S,
    retries: Annotated[int, typer.Option(
        "--retries", metavar="N", min=0, help="Retries on HTTP 429/503.")] = DEFAULT_RETRIES,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", metavar="VAR", help="Environment variable holding the API key.")] = None,
    stream: Annotated[bool, typer.Option(
        "--stream", help="Stream the answers and report the time to the first token.")
    ] = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE",
        help="Draw speedup and tau against concurrency (.png or .svg; needs "
             "matplotlib).")] = None,
    output_format: Annotated[PlainFormat, typer.Option("--format", metavar="[text|json]",
                                                       help="text or json.")
                             ] = PlainFormat.text, as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Benchmark an engine with and without speculation at each concurrency tier.

    Example: dflash-guard bench --baseline http://h:8000 --candidate http://h:8001 --plot b.svg
    """
    from dflash_guard.cli.options import engine
    from dflash_guard.formats.text.bench import render_bench
    from dflash_guard.lossless.prompts import read_prompts
    from dflash_guard.rollout.bench import BenchOptions, parse_tiers, run_bench
    from dflash_guard.urls import metrics_url
    from kernels_ref.prompts import DEFAULT_PROMPTS

    output_format = chosen_format(output_format, as_json)

    if requests is not None and duration is not None:
        raise InputError("give either --requests or --duration, not both")
    options = BenchOptions(
        engine(baseline, model=model, api_key_env=api_key_env, timeout=timeout,
               retries=retries),
        engine(candidate, model=model, api_key_env=api_key_env, timeout=timeout,
               retries=retries,
               metrics=None if no_metrics else metrics or metrics_url(candidate)),
        tuple(read_prompts(prompts or DEFAULT_PROMPTS)), tiers=parse_tiers(concurrency),
        requests=requests, duration_s=duration, max_tokens=max_tokens, stream=stream,
    )
    if plot is not None:
        from dflash_guard.rollout.plot import check_plot_target

        check_plot_target(plot)
    with progress(quiet) as shown:
        report = run_bench(options, shown)
    if plot is not None:
        from dflash_guard.rollout.plot import plot_report

        plot_report(report, plot)
    finish(report, output_format, render_bench)


def register(app: typer.Typer) -> None:
    """Add `bench` to `app`."""
    app.command("bench")(bench)
