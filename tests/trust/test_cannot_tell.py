"""Issue 45 class 5: a check that cannot establish its claim says so and does not pass. The
acceptance figures the gate asks for (`difftest.endpoints.metrics`) are the case here; the
wheel (`test_installed.py`), the engine's release (`test_engines.py`) and a record's tolerance
(`test_comparison_standard.py`) have theirs."""

from __future__ import annotations

import pytest

from dflash_guard.lossless.endpoint.metrics import (
    acceptance_from_metrics,
    metrics_cannot_tell,
    parse_prometheus,
)

BEFORE = ("vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_accepted_tokens_total 20\n"
          "vllm:spec_decode_num_draft_tokens_total 40\n")


def _figures(after: str, before: str = BEFORE):
    return acceptance_from_metrics(parse_prometheus(before), parse_prometheus(after))


@pytest.mark.parametrize(("after", "why"), [
    ("process_cpu_seconds_total 3\n", "publishes no speculative-decoding counters"),
    (BEFORE, "counted no draft"),  # nothing drafted during the diff
    (BEFORE.replace("_drafts_total 10", "_drafts_total NaN"), "not finite"),
    (BEFORE.replace("_drafts_total 10", "_drafts_total +Inf"), "not finite"),
])
def test_metrics_that_establish_nothing_cannot_tell(after, why):
    reason = metrics_cannot_tell(_figures(after))
    assert reason is not None and why in reason


def test_real_figures_can_tell():
    after = ("vllm:spec_decode_num_drafts_total 20\nvllm:spec_decode_num_accepted_tokens_total 45"
             "\nvllm:spec_decode_num_draft_tokens_total 80\n")
    figures = _figures(after)
    assert figures is not None and metrics_cannot_tell(figures) is None
