"""`bench --plot`: speedup (and the candidate's tau) against concurrency, drawn with matplotlib.

matplotlib is an optional extra (`pip install 'dflash-guard[plot]'`); without it the command
says so in one line (exit 2) instead of failing on import.
"""

from __future__ import annotations

import io
from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.fileio import write_atomic
from dflash_guard.rollout.bench import BenchReport

PLOT_FORMATS = ("png", "svg")


def check_plot_target(out: Path) -> str:
    """The plot format of `out` ("png" or "svg"), once matplotlib is known to be importable:
    checked before the benchmark runs, so a missing extra costs no benchmark."""
    suffix = out.suffix.lower().removeprefix(".")
    if suffix not in PLOT_FORMATS:
        raise InputError(f"--plot {out}: expected a .png or .svg file")
    try:
        import matplotlib
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'dflash-guard[plot]'") from None
    matplotlib.use("Agg")  # no display: draw into files only
    return suffix


def plot_report(report: BenchReport, out: Path) -> None:
    """Draw `report` into `out` (.png or .svg), written atomically."""
    suffix = check_plot_target(out)
    from matplotlib import pyplot
    tiers = [t.concurrency for t in report.tiers]
    figure, speed_axis = pyplot.subplots(figsize=(6, 4))
    speed_axis.plot(tiers, [t.speedup for t in report.tiers], marker="o", label="speedup")
    speed_axis.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    speed_axis.set_xscale("log", base=2)
    speed_axis.set_xticks(tiers, [str(t) for t in tiers])
    speed_axis.set_xlabel("concurrency")
    speed_axis.set_ylabel("speedup (candidate / baseline tokens/s)")
    taus = [(t.concurrency, t.tau) for t in report.tiers if t.tau is not None]
    if taus:
        tau_axis = speed_axis.twinx()
        tau_axis.plot([c for c, _ in taus], [v for _, v in taus], marker="s", color="tab:orange",
                      label="tau")
        tau_axis.set_ylabel("candidate tau")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format=suffix)
    pyplot.close(figure)
    write_atomic(out, buffer.getvalue())  # a failure is a WriteError naming `out`
