"""The candidate's speculative-decoding acceptance, read from its Prometheus `/metrics`.

vLLM publishes counters (deltas over the run give tau and the acceptance rate), SGLang an
acceptance-length gauge; implausible figures become warnings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AcceptanceFigures:
    """Speculative-decoding acceptance the candidate reported on its metrics endpoint."""

    source: str  # "vllm" (counter deltas over this run) | "sglang" (gauge after the run)
    mean_acceptance_length: float | None  # tokens committed per target forward (tau)
    acceptance_rate: float | None  # accepted draft tokens / drafted tokens
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?$")
VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"


def parse_prometheus(text: str) -> dict[str, list[float]]:
    """Sample values by metric name (a counter's `_total` suffix dropped), one per label set."""
    samples: dict[str, list[float]] = {}
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
        samples.setdefault(name, []).append(value)
    return samples


def acceptance_from_metrics(
    before: dict[str, list[float]], after: dict[str, list[float]]
) -> AcceptanceFigures | None:
    """Acceptance over the run: vLLM counter deltas, else SGLang's gauges; None if neither."""
    if VLLM_DRAFTS in after and VLLM_ACCEPTED in after:

        def delta(name: str) -> float:
            return sum(after.get(name, [])) - sum(before.get(name, []))

        drafts, drafted = delta(VLLM_DRAFTS), delta(VLLM_DRAFT_TOKENS)
        accepted = delta(VLLM_ACCEPTED)
        return AcceptanceFigures(
            "vllm",
            1.0 + accepted / drafts if drafts > 0 else None,
            accepted / drafted if drafted > 0 else None,
            drafts,
            drafted,
            accepted,
        )
    if SGLANG_ACCEPT_LENGTH in after:
        lengths, rates = after[SGLANG_ACCEPT_LENGTH], after.get(SGLANG_ACCEPT_RATE)
        return AcceptanceFigures(
            "sglang",
            sum(lengths) / len(lengths),
            sum(rates) / len(rates) if rates else None,
        )
    return None


def acceptance_warnings(figures: AcceptanceFigures | None) -> list[str]:
    """Red flags in the acceptance figures: everything accepted, or acceptance collapsed."""
    if figures is None:
        return ["the metrics endpoint publishes no speculative-decoding counters"]
    warnings = []
    if figures.source == "vllm" and not figures.drafts:
        warnings.append("no drafts were counted during the run: is speculation enabled?")
    if figures.acceptance_rate is not None and figures.acceptance_rate >= 0.999:
        warnings.append("every drafted token was accepted: suspicious (future leakage?)")
    tau = figures.mean_acceptance_length
    if tau is not None and tau < 1.1:
        warnings.append(f"acceptance collapsed (tau {tau:.2f}): mask-token aliasing?")
    return warnings
