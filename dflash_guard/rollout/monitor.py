"""Acceptance monitoring of a live engine: tau per interval from its Prometheus counters.

Each interval compares two scrapes of the engine's `/metrics` (vLLM's or llama.cpp's
`spec_decode_*` counters, SGLang's acceptance gauges of its last decode log; names and parser in
`endpoint/metrics.py`): tau = 1 + accepted / drafts over the interval. A counter that went down
was reset (the engine restarted): its delta is its new value. Three alarms, the silent failures
of a rollout: tau collapsed to about 1 (a wrong block size, a mismatched drafter, a runtime bug),
tau dropped beyond a threshold against the baseline (the approval record's difftest tau, or a
given value), and every drafted token accepted (the drafter sees the future). An interval with no
figure (nothing drafted, a NaN gauge) is `cannot-tell`, an alarm too: never "ok".
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace

from dflash_guard.errors import InputError
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.endpoint.metrics import (
    ACCEPTED,
    COUNTER_PREFIXES,
    DRAFT_TOKENS,
    DRAFTS,
    SGLANG_ACCEPT_LENGTH,
    Samples,
    parse_prometheus,
    sglang_gauges,
)

DEFAULT_INTERVAL_S = 60.0
DEFAULT_MIN_TAU = 1.1  # below this, speculation has collapsed: almost every draft rejected
DEFAULT_MAX_DROP_PCT = 25.0
LEAKAGE_RATE = 0.999  # every drafted token accepted: the drafter sees the target's future

COLLAPSE = "collapse"
DROP = "drop"
LEAKAGE = "leakage"
CANNOT_TELL = "cannot-tell"  # no figure to judge: never "ok"


@dataclass(frozen=True)
class MonitorOptions:
    """What `monitor` watches and when it raises an alarm."""

    engine: EngineEndpoint  # its `metrics_url` is scraped
    interval_s: float = DEFAULT_INTERVAL_S
    min_tau: float = DEFAULT_MIN_TAU
    max_drop_pct: float = DEFAULT_MAX_DROP_PCT
    baseline_tau: float | None = None  # from --baseline-tau or the approval record


@dataclass(frozen=True)
class Alarm:
    """One reason an interval looks wrong."""

    kind: str  # COLLAPSE | DROP | LEAKAGE
    message: str


@dataclass(frozen=True)
class IntervalReading:
    """Acceptance over one interval (None figures: the engine drafted nothing in it)."""

    source: str  # "vllm" | "llamacpp" | "sglang"
    seconds: float
    drafts: float | None
    draft_tokens: float | None
    accepted_tokens: float | None
    tau: float | None
    acceptance_rate: float | None
    reset: bool = False  # a counter went down: the engine restarted during the interval
    alarms: tuple[Alarm, ...] = field(default=())

    @property
    def passed(self) -> bool:
        """No alarm in this interval."""
        return not self.alarms

    def to_json(self) -> dict[str, object]:
        """One JSON line's fields, for log shippers."""
        record = asdict(self)
        record["alarms"] = [asdict(a) for a in self.alarms]
        record["passed"] = self.passed
        return record


def _counter_source(samples: Samples) -> str | None:
    for prefix in COUNTER_PREFIXES:
        if f"{prefix}:{DRAFTS}" in samples and f"{prefix}:{ACCEPTED}" in samples:
            return prefix
    return "sglang" if SGLANG_ACCEPT_LENGTH in samples else None


def interval_reading(before: Samples, after: Samples, seconds: float) -> IntervalReading:
    """Acceptance between two scrapes; raises `InputError` when the endpoint publishes none."""
    source = _counter_source(after)
    if source is None:
        raise InputError("the metrics endpoint publishes no speculative-decoding counters "
                         f"({', '.join(p + ':' + DRAFTS for p in COUNTER_PREFIXES)} or "
                         f"{SGLANG_ACCEPT_LENGTH})")
    if source == "sglang":  # gauges of SGLang's last decode log interval, not of this one
        tau, rate = sglang_gauges(after)
        return IntervalReading(source, seconds, None, None, None, _finite(tau), _finite(rate))
    reset = False

    def delta(name: str) -> float:
        nonlocal reset
        new = sum(after.get(f"{source}:{name}", {}).values())
        old = sum(before.get(f"{source}:{name}", {}).values())
        if new < old:  # a reset: the counter restarted from 0 during the interval
            reset = True
            return new
        return new - old

    drafts, drafted, accepted = delta(DRAFTS), delta(DRAFT_TOKENS), delta(ACCEPTED)
    return IntervalReading(
        source, seconds, drafts, drafted, accepted,
        _finite(1.0 + accepted / drafts) if drafts > 0 else None,
        _finite(accepted / drafted) if drafted > 0 else None,
        reset,
    )


def _finite(value: float | None) -> float | None:
    """A figure, or None when it is NaN or infinite (a gauge that says nothing)."""
    return value if value is not None and math.isfinite(value) else None


def alarms_for(reading: IntervalReading, options: MonitorOptions) -> tuple[Alarm, ...]:
    """The alarms one interval raises under `options`; an interval without a tau (nothing
    drafted, or a NaN gauge) cannot be told from a stalled engine: `cannot-tell`."""
    alarms = []
    tau, rate = reading.tau, reading.acceptance_rate
    if tau is None:
        alarms.append(Alarm(CANNOT_TELL, "no acceptance figure in the interval (nothing drafted, "
                                         "or a NaN gauge): an idle or stalled engine cannot be "
                                         "told from a healthy one"))
    if tau is not None and tau < options.min_tau:
        alarms.append(Alarm(COLLAPSE, f"tau {tau:.2f} is below {options.min_tau:g}: speculation "
                                      "collapsed (wrong block size, mismatched drafter?)"))
    if tau is not None and options.baseline_tau is not None:
        floor = options.baseline_tau * (1 - options.max_drop_pct / 100)
        if tau < floor:
            drop = 100 * (1 - tau / options.baseline_tau)
            alarms.append(Alarm(DROP, f"tau {tau:.2f} is {drop:.0f}% below the baseline "
                                      f"{options.baseline_tau:.2f} "
                                      f"(allowed {options.max_drop_pct:g}%)"))
    if rate is not None and rate >= LEAKAGE_RATE:
        alarms.append(Alarm(LEAKAGE, "every drafted token was accepted: the drafter may see the "
                                     "target's future (leakage)"))
    return tuple(alarms)


def watch(
    options: MonitorOptions,
    scrape: Callable[[], str],
    *,
    intervals: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[IntervalReading]:
    """Scrape every `options.interval_s` and yield each interval's reading with its alarms;
    `intervals` readings, or forever when None."""
    before, started = parse_prometheus(scrape()), clock()
    count = 0
    while intervals is None or count < intervals:
        sleep(options.interval_s)
        after, now = parse_prometheus(scrape()), clock()
        reading = interval_reading(before, after, round(now - started, 3))
        yield replace(reading, alarms=alarms_for(reading, options))
        before, started, count = after, now, count + 1


def json_line(reading: IntervalReading) -> str:
    """A reading as one sorted JSON line."""
    return json.dumps(reading.to_json(), sort_keys=True)
