"""The candidate's speculative-decoding acceptance, read from its Prometheus `/metrics`.

vLLM (`vllm:`) and llama.cpp (`llamacpp:`, with `--metrics`) publish the same counters under their
own prefix: drafts, drafted tokens, accepted tokens, and accepted tokens per draft position
(`..._per_pos_total{position="i"}`). Deltas over the run give tau (1 + accepted / drafts), the
acceptance rate and the per-position acceptance curve (the share of drafts whose i-th token was
accepted). SGLang publishes gauges instead (`sglang:spec_accept_length`, `sglang:spec_accept_rate`,
declared in sglang 0.5.23's `srt/observability/metrics_collector.py`): the mean accepted length
(the accepted drafts and the bonus token of each verify step) and the accepted share of drafted
tokens over its last decode log interval, both 0 when the server does not speculate.
Implausible figures become warnings.
llama.cpp also reports each response's `timings.draft_n` / `draft_n_accepted`
(`ResponseDrafts`, summed by the run).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

COUNTER_PREFIXES = ("vllm", "llamacpp")  # same counter names, the engine's prefix
DRAFTS = "spec_decode_num_drafts"
DRAFT_TOKENS = "spec_decode_num_draft_tokens"
ACCEPTED = "spec_decode_num_accepted_tokens"
ACCEPTED_PER_POSITION = "spec_decode_num_accepted_tokens_per_pos"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"

# name -> {label text (`{...}` or ""): value}; a counter's `_total` suffix is dropped
Samples = dict[str, dict[str, float]]


@dataclass(frozen=True)
class AcceptanceFigures:
    """Speculative-decoding acceptance the candidate reported on its metrics endpoint."""

    source: str  # "vllm" | "llamacpp" (counter deltas over this run) | "sglang" (gauge after it)
    mean_acceptance_length: float | None  # tokens committed per target forward (tau)
    acceptance_rate: float | None  # accepted draft tokens / drafted tokens
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] | None = None  # drafts whose i-th token was accepted
    acceptance_curve: tuple[float, ...] | None = None  # accepted_per_position / drafts


@dataclass(frozen=True)
class ResponseDrafts:
    """Drafted and accepted tokens the responses reported (llama.cpp's `timings`), summed."""

    responses: int
    draft_tokens: int
    accepted_tokens: int

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @classmethod
    def total(cls, counts: Iterable[tuple[int, int] | None]) -> ResponseDrafts | None:
        """The sum of per-response `(draft_n, draft_n_accepted)`; None when none reported any."""
        reported = [c for c in counts if c is not None]
        if not reported:
            return None
        return cls(len(reported), sum(c[0] for c in reported), sum(c[1] for c in reported))


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?$")
_POSITION = re.compile(r'position="(\d+)"')
# Draft positions a server may report (a DFlash block is 16 or fewer; llama.cpp's 64 at most):
# a larger position is hostile, and would size an allocation (`range(max(position) + 1)`).
MAX_DRAFT_POSITIONS = 1024


def parse_prometheus(text: str) -> Samples:
    """Sample values by metric name (a counter's `_total` suffix dropped) and label set."""
    samples: Samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        name = match.group(1).removesuffix("_total")
        samples.setdefault(name, {})[match.group(2) or ""] = value
    return samples


def _per_position(samples: Samples, name: str) -> dict[int, float]:
    """`{position: value}` of a per-position counter (summed over its other labels)."""
    counts: dict[int, float] = {}
    for labels, value in samples.get(name, {}).items():
        if match := _POSITION.search(labels):
            digits = match.group(1)
            if len(digits) > 6 or int(digits) >= MAX_DRAFT_POSITIONS:
                raise ValueError(f"draft position {digits[:12]} is past {MAX_DRAFT_POSITIONS}")
            position = int(digits)
            counts[position] = counts.get(position, 0.0) + value
    return counts


def _counter_figures(prefix: str, before: Samples, after: Samples) -> AcceptanceFigures:
    def delta(name: str) -> float:
        return sum(after.get(name, {}).values()) - sum(before.get(name, {}).values())

    drafts = delta(f"{prefix}:{DRAFTS}")
    drafted = delta(f"{prefix}:{DRAFT_TOKENS}")
    accepted = delta(f"{prefix}:{ACCEPTED}")
    per_pos_name = f"{prefix}:{ACCEPTED_PER_POSITION}"
    per_position = curve = None
    if per_pos_name in after:
        try:
            old, new = _per_position(before, per_pos_name), _per_position(after, per_pos_name)
        except ValueError:  # a hostile position: no curve, never a huge allocation
            old, new = {}, {}
        per_position = tuple(new.get(i, 0.0) - old.get(i, 0.0) for i in range(max(new) + 1)) \
            if new else ()
        curve = tuple(n / drafts for n in per_position) if drafts > 0 else None
    return AcceptanceFigures(
        prefix,
        1.0 + accepted / drafts if drafts > 0 else None,
        accepted / drafted if drafted > 0 else None,
        drafts,
        drafted,
        accepted,
        per_position,
        curve,
    )


def sglang_gauges(samples: Samples) -> tuple[float | None, float | None]:
    """SGLang's acceptance length and rate, each the mean over the ranks' gauges; a length under
    1 is no figure (SGLang publishes 0 when it does not speculate) and takes the rate with it."""
    lengths = list(samples.get(SGLANG_ACCEPT_LENGTH, {}).values())
    rates = list(samples.get(SGLANG_ACCEPT_RATE, {}).values())
    tau = sum(lengths) / len(lengths) if lengths else None
    rate = sum(rates) / len(rates) if rates else None
    if tau is not None and tau < 1:
        return None, None
    return tau, rate


def acceptance_from_metrics(before: Samples, after: Samples) -> AcceptanceFigures | None:
    """Acceptance over the run: vLLM's or llama.cpp's counter deltas, else SGLang's gauges;
    None if the endpoint publishes none of them."""
    for prefix in COUNTER_PREFIXES:
        if f"{prefix}:{DRAFTS}" in after and f"{prefix}:{ACCEPTED}" in after:
            return _counter_figures(prefix, before, after)
    if SGLANG_ACCEPT_LENGTH in after:
        return AcceptanceFigures("sglang", *sglang_gauges(after))
    return None


def metrics_cannot_tell(figures: AcceptanceFigures | None) -> str | None:
    """Why acceptance figures asked for establish nothing (None: they are figures): no
    speculative-decoding counters, counters that are not finite, or no draft counted."""
    if figures is None:
        return "the candidate's /metrics publishes no speculative-decoding counters"
    numbers = (figures.mean_acceptance_length, figures.acceptance_rate, figures.drafts,
               figures.draft_tokens, figures.accepted_tokens, *(figures.acceptance_curve or ()))
    if any(n is not None and not math.isfinite(n) for n in numbers):
        return "the candidate's acceptance counters are not finite numbers"
    if figures.source in COUNTER_PREFIXES and not figures.drafts:
        return "the candidate counted no draft during the diff (is speculation on?)"
    if figures.source == "sglang" and figures.mean_acceptance_length is None:
        return f"the candidate's {SGLANG_ACCEPT_LENGTH} is under 1: it does not speculate"
    return None


def acceptance_warnings(figures: AcceptanceFigures | None) -> list[str]:
    """Red flags in the acceptance figures: everything accepted, or acceptance collapsed."""
    if figures is None:
        return ["the metrics endpoint publishes no speculative-decoding counters"]
    numbers = (figures.mean_acceptance_length, figures.acceptance_rate, figures.drafts,
               figures.draft_tokens, figures.accepted_tokens, *(figures.acceptance_curve or ()))
    if any(n is not None and not math.isfinite(n) for n in numbers):
        return ["the acceptance figures are not finite numbers (NaN or infinite counters): "
                "cannot tell"]
    warnings = []
    if figures.source in COUNTER_PREFIXES and not figures.drafts:
        warnings.append("no drafts were counted during the run: is speculation enabled?")
    if figures.source == "sglang" and figures.mean_acceptance_length is None:
        warnings.append(f"{SGLANG_ACCEPT_LENGTH} is under 1: is speculation enabled?")
    if figures.acceptance_rate is not None and figures.acceptance_rate >= 0.999:
        warnings.append("every drafted token was accepted: suspicious (future leakage?)")
    tau = figures.mean_acceptance_length
    if tau is not None and tau < 1.1:
        warnings.append(f"acceptance collapsed (tau {tau:.2f}): mask-token aliasing?")
    curve = figures.acceptance_curve or ()
    if any(later > earlier + 1e-9 for earlier, later in zip(curve, curve[1:], strict=False)):
        warnings.append("a later draft position is accepted more often than an earlier one: "
                        "the per-position counters are inconsistent")
    return warnings
