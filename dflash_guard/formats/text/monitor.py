"""Text view of `monitor`: one line per watched interval."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dflash_guard.rollout.monitor import IntervalReading


def interval_line(reading: IntervalReading) -> str:
    """`SOURCE over N s: tau T, acceptance A% - ok` (or each alarm)."""
    tau = "n/a (nothing drafted)" if reading.tau is None else f"{reading.tau:.2f}"
    rate = "" if reading.acceptance_rate is None else f", acceptance {reading.acceptance_rate:.0%}"
    reset = " (counters reset)" if reading.reset else ""
    verdict = "; ".join(f"ALARM {a.kind}: {a.message}" for a in reading.alarms) or "ok"
    return f"{reading.source} over {reading.seconds:g} s: tau {tau}{rate}{reset} - {verdict}"
