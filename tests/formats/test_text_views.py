"""The text views in `formats/text/`: the shared divergence and verdict lines of the five difftest
views, and the gate, verify, bench and monitor views, on reports built by hand; plus the one
JSON writer and `exit_code`."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from dflash_guard.errors import EXIT_FINDING, EXIT_OK
from dflash_guard.formats import exit_code
from dflash_guard.formats.json import dumps
from dflash_guard.formats.terminal import safe_console
from dflash_guard.formats.text.bench import render_bench
from dflash_guard.formats.text.difftest import (
    divergence_line,
    render_endpoint,
    render_isolation,
    render_local,
    render_reference,
    verdict_line,
)
from dflash_guard.formats.text.gate import render_gate
from dflash_guard.formats.text.monitor import interval_line
from dflash_guard.formats.text.verify import render_verify
from dflash_guard.gate import STEPS, GateResult
from dflash_guard.gate.record import CheckRow
from dflash_guard.lossless.endpoint import EndpointDiffReport
from dflash_guard.lossless.isolation import IsolationReport
from dflash_guard.lossless.logprob_check import LogprobCheck, LogprobDelta, PromptLogprobs
from dflash_guard.lossless.reference_diff import ReferenceDiffReport
from dflash_guard.lossless.result import Divergence, PromptResult, SpeculationStats
from dflash_guard.outcome import Outcome
from dflash_guard.pins.verify import FileProblem, VerifyReport
from dflash_guard.rollout.bench import BenchReport, TierResult, TierRun
from dflash_guard.rollout.monitor import Alarm, IntervalReading
from dflash_guard.trust.verified import VerifiedLock

SAME = PromptResult("same", None)
TIE = PromptResult("tie", Divergence(3, 7, 8, 0.001, near_tie=True))
HARD = PromptResult("hard\x1b[2J", Divergence(5, 1, None, 2.5))


def text(render, report) -> str:
    console = safe_console(record=True, width=200, file=io.StringIO())
    render(report, console)
    return console.export_text()


def test_divergence_line_names_both_sides_and_the_margin():
    line = divergence_line(TIE, "baseline", "candidate")
    assert line.startswith("[yellow]near-tie[/] tie: first at generated token 3: ")
    assert "baseline 7, candidate 8, baseline top-2 margin 0.001" in line
    hard = divergence_line(HARD, "alone", "among tenants", "solo")
    assert hard.startswith("[red]hard[/]") and "among tenants <end of output>" in hard
    assert "\x1b" not in hard and "\\x1b[2J" in hard  # the prompt id cannot drive the terminal


def test_verdict_line_has_three_shapes():
    def report(*results):
        return EndpointDiffReport("b", "c", 0.05, results)

    assert verdict_line(report(SAME), passed=True) == "verdict: [green]identical[/]"
    assert "1 near-tie(s)[/], no hard divergence" in verdict_line(report(SAME, TIE), passed=True)
    failed = verdict_line(report(TIE, HARD), passed=False, failed="NOT ISOLATED")
    assert failed == "verdict: [red]NOT ISOLATED[/]: 1 hard, 1 near-tie(s)"


def test_the_engine_views_share_the_lines():
    endpoint = text(render_endpoint, EndpointDiffReport("http://b", "http://c", 0.05,
                                                        (SAME, TIE, HARD)))
    assert "baseline http://b  vs  candidate http://c (3 prompts" in endpoint
    assert "near-tie tie: first at generated token 3: baseline 7, candidate 8" in endpoint
    assert endpoint.rstrip().endswith("verdict: DIVERGED: 1 hard, 1 near-tie(s)")
    isolation = text(render_isolation, IsolationReport("http://c", 0.05, 4, 2, (SAME, TIE)))
    assert "alone 7, among tenants 8, solo top-2 margin 0.001" in isolation
    assert isolation.rstrip().endswith("verdict: 1 near-tie(s), no hard divergence")
    agreed = LogprobCheck(0.05, "float32 (measured)", (PromptLogprobs(
        "same", 1, 1, 1, LogprobDelta("same", 0, 7, -0.5, -0.5, committed=True)),))
    reference = ReferenceDiffReport("t", "http://c", None, 0.05, "p.jsonl", "0" * 64, 8,
                                    results=(SAME,), logprobs=agreed)
    assert text(render_reference, reference).rstrip().endswith("verdict: identical")
    refused = ReferenceDiffReport("t", "http://c", None, 0.05, "p.jsonl", "0" * 64, 8,
                                  refused="the GGUF's tokenizer differs")
    assert "refused before any diff: the GGUF's tokenizer differs" in text(render_reference,
                                                                            refused)
    assert not refused.passed and exit_code(refused) == EXIT_FINDING


def test_local_view_and_fail_on_warning():
    from dflash_guard.lossless.local import DifftestReport

    stats = SpeculationStats(2.0, 4, 8, 4, {"2": 4})
    same = PromptResult("same", None, speculation=stats)
    report = DifftestReport((same,), 4, 2.0, {"2": 4}, ["tau fell"])
    shown = text(render_local, report)
    assert "warning: tau fell" in shown and shown.rstrip().endswith("verdict: identical")
    assert report.passed and exit_code(report) == EXIT_OK
    strict = DifftestReport((same,), 4, 2.0, {"2": 4}, ["tau fell"], fail_on_warning=True)
    assert not strict.passed and strict.identical and exit_code(strict) == EXIT_FINDING
    assert "FAILED" in text(render_local, strict)


def test_gate_view_lists_the_checks_not_run():
    result = GateResult(False, (CheckRow("lockfile", Outcome.passed("2 artifacts")),
                                CheckRow("lockfile signature", Outcome.refused("bad"))),
                        reason="lockfile signature: bad")
    shown = text(render_gate, result)
    assert "REFUSED: lockfile signature: bad" in shown
    assert result.not_run == list(STEPS[2:]) and all(step in shown for step in STEPS)
    assert result.to_json()["passed"] is False and exit_code(result) == EXIT_FINDING


def test_verify_view_shows_problems_and_signatures():
    report = VerifyReport([FileProblem("drafter", "model.safetensors", "sha256", "a", "b")],
                          {"drafter": Path("/models/d")})
    shown = text(render_verify, VerifiedLock("dflash.lock", "sha256:0", report, ()))
    assert "MISMATCH: 1 problem(s)" in shown and "model.safetensors" in shown


def test_bench_and_monitor_views():
    def run(tokens_per_s: float) -> TierRun:
        return TierRun(4, 100, 1.0, tokens_per_s, 0.1, 0.2)

    bench = BenchReport((TierResult(1, run(10), run(20), 3.0), TierResult(8, run(40), run(30),
                                                                          None)))
    shown = text(render_bench, bench)
    assert "2.00x" in shown and "crossover: speculation is slower from concurrency 8" in shown
    assert bench.passed and bench.to_json()["passed"] is True
    reading = IntervalReading("vllm", 60.0, 10, 100, 1, 1.1, 0.01,
                              alarms=(Alarm("collapse", "tau 1.10 is below 1.2"),))
    assert interval_line(reading).endswith("- ALARM collapse: tau 1.10 is below 1.2")
    assert not reading.passed and reading.to_json()["passed"] is False


def test_the_json_writer_refuses_what_json_cannot_hold():
    assert dumps({"b": 1, "a": [None]}) == '{\n  "a": [\n    null\n  ],\n  "b": 1\n}\n'
    with pytest.raises(TypeError):
        dumps({"path": Path("x")})  # no silent str(): a report says how it spells a path
