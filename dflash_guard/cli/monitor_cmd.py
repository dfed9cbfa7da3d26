"""`dflash-guard monitor`: watch a live engine's speculative acceptance (tau) for silent drops."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import stdout
from dflash_guard.cli.options import Json, Quiet, chosen_format
from dflash_guard.errors import InputError
from dflash_guard.formats import PlainFormat, verdict_exit
from dflash_guard.formats.text.monitor import interval_line
from dflash_guard.lossless.defaults import DEFAULT_TIMEOUT_S
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.rollout.monitor import (
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_DROP_PCT,
    DEFAULT_MIN_TAU,
    MonitorOptions,
    json_line,
    watch,
)


def verified_baseline(record: Path, policy: str | None) -> float:
    """The tau of an approval record whose signature verifies (`verify-approval`), or of a
    signed serving record whose served diff passed; an unsigned or edited record is an input
    error, never a baseline."""
    from dflash_guard.trust.policy import load_policy
    from dflash_guard.trust.provenance import check_approval
    from dflash_guard.trust.serving import checked_served_tau, is_serving_record

    if is_serving_record(record):  # launch --verify-served: the engine's tau as it served
        return checked_served_tau(record, load_policy(policy))
    verdict = check_approval(record, load_policy(policy), roots=None)
    if verdict.policy_problem is not None:
        raise InputError(f"--record {record}: {verdict.policy_problem}")
    if not verdict.passed:
        reasons = "; ".join(c.reason for c in verdict.signatures if not c.ok)
        raise InputError(f"--record {record}: not signed by an approval signer of the policy "
                         f"({reasons}); check it with `dflash-guard verify-approval`")
    tau = verdict.acceptance_length
    if tau is None or tau < 1:
        raise InputError(f"--record {record}: the approval record holds no acceptance length "
                         "(tau)")
    return tau


def monitor(
    metrics: Annotated[str, typer.Option(
        "--metrics", metavar="URL",
        help="The engine's Prometheus endpoint, e.g. http://host:8000/metrics.")],
    interval: Annotated[float, typer.Option(
        "--interval", metavar="SECONDS", min=0.0, help="Seconds between scrapes (one interval).")
    ] = DEFAULT_INTERVAL_S,
    min_tau: Annotated[float, typer.Option(
        "--min-tau", metavar="TAU", min=1.0,
        help="Alarm when an interval's tau falls below this (collapse).")
    ] = DEFAULT_MIN_TAU,
    max_drop: Annotated[float, typer.Option(
        "--max-drop", metavar="PCT", min=0.0, max=100.0,
        help="Alarm when tau falls more than this percentage below the baseline.")
    ] = DEFAULT_MAX_DROP_PCT,
    baseline_tau: Annotated[float | None, typer.Option(
        "--baseline-tau", metavar="TAU", min=1.0,
        help="The expected tau (instead of --record).")] = None,
    record: Annotated[Path | None, typer.Option(
        "--record", metavar="FILE",
        help="An approval record from `gate` (its difftest tau is the baseline) or a serving "
             "record from `launch --verify-served` (the engine's tau as it served), signed by "
             "an approval signer of --policy.")
    ] = None,
    policy: Annotated[str | None, typer.Option(
        "--policy", metavar="POLICY",
        help="With --record: the policy whose approval signers signed it.")
    ] = None,
    once: Annotated[bool, typer.Option(
        "--once", help="Watch one interval, then exit (1 on an alarm): for cron or CI.")
    ] = False,
    intervals: Annotated[int | None, typer.Option(
        "--intervals", metavar="N", min=1,
        help="Stop after this many intervals (default: run until stopped).")
    ] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", metavar="SECONDS", min=0.001,
        help="Per-scrape timeout in seconds.")] = DEFAULT_TIMEOUT_S,
    output_format: Annotated[PlainFormat, typer.Option(
        "--format", metavar="[text|json]",
        help="text, or json: one JSON line per interval for log shippers.")
    ] = PlainFormat.text, as_json: Json = False, quiet: Quiet = False,
) -> None:
    """Scrape an engine's metrics and alarm on collapsed, dropped or 100% acceptance.

    Exits 1 when any watched interval raised an alarm (with --once or --intervals).

    Example: dflash-guard monitor --metrics http://127.0.0.1:8000/metrics --record app.json --once
    """
    output_format = chosen_format(output_format, as_json)
    if baseline_tau is not None and record is not None:
        raise InputError("give either --baseline-tau or --record, not both")
    if record is not None:
        baseline_tau = verified_baseline(record, policy)
    engine = EngineEndpoint(metrics, metrics_url=metrics, timeout=timeout)
    options = MonitorOptions(engine, interval, min_tau, max_drop, baseline_tau)
    passed = True
    with engine.client("metrics") as client:
        for reading in watch(options, lambda: client.get_text(metrics),
                             intervals=1 if once else intervals):
            passed = passed and reading.passed
            if output_format is PlainFormat.json:
                print(json_line(reading), flush=True)
            else:
                stdout.print(interval_line(reading), highlight=False, markup=False)
    raise typer.Exit(verdict_exit(passed))


def register(app: typer.Typer) -> None:
    """Add `monitor` to `app`."""
    app.command("monitor")(monitor)
