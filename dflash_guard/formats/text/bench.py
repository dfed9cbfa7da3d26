"""Text view of `bench`: one row per concurrency tier, then where speculation stops paying."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from rich.console import Console

    from dflash_guard.rollout.bench import BenchReport


def render_bench(report: BenchReport, console: Console) -> None:
    """Throughput, latency (and TTFT when streamed) and tau per tier, then the crossover."""
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
    console.print(table)
    crossover = report.crossover
    console.print("speculation pays at every tier" if crossover is None else
                  f"crossover: speculation is slower from concurrency {crossover}",
                  highlight=False, markup=False)
