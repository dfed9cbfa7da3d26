"""`dflash-guard bench` against `kernels_ref.serve` engines (AR baseline, speculative candidate)
with tiny budgets, and the report's arithmetic (speedup, crossover, percentiles) on its own."""

from __future__ import annotations

import json
import sys

import pytest

from dflash_guard.errors import InputError
from dflash_guard.rollout.bench import (
    BenchReport,
    TierResult,
    TierRun,
    parse_tiers,
    percentile,
)


def run(tokens_per_s: float) -> TierRun:
    return TierRun(4, 100, 1.0, tokens_per_s, 0.1, 0.2)


def report(*speeds: tuple[int, float, float]) -> BenchReport:
    return BenchReport(tuple(TierResult(c, run(b), run(s), 3.0) for c, b, s in speeds))


def test_speedup_and_crossover():
    bench = report((1, 100, 180), (4, 300, 330), (16, 900, 700), (32, 1000, 1100))
    assert [round(t.speedup, 2) for t in bench.tiers] == [1.8, 1.1, 0.78, 1.1]
    assert bench.crossover == 16  # the first tier where speculation loses
    assert bench.speedup_at(4) == pytest.approx(1.1) and bench.speedup_at(8) is None
    assert report((1, 100, 150)).crossover is None
    assert bench.to_json()["crossover"] == 16


def test_percentile_and_tiers():
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([0.5], 95) == 0.5 and percentile([], 50) == 0.0
    assert percentile(list(map(float, range(1, 101))), 95) == pytest.approx(95.05)
    assert parse_tiers("1,2,4") == (1, 2, 4)
    for bad in ("", "0,1", "1,1", "a"):
        with pytest.raises(InputError):
            parse_tiers(bad)


def test_plot_without_matplotlib_fails_before_any_request(cli, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the extra were not installed
    result = cli("bench", "--baseline", "http://127.0.0.1:9", "--candidate", "http://127.0.0.1:9",
                 "--plot", tmp_path / "bench.png")
    assert result.exit_code == 2
    assert "pip install 'dflash-guard[plot]'" in result.stderr
    assert not (tmp_path / "bench.png").exists()


def test_unreachable_endpoint_is_one_line(cli):
    result = cli("bench", "--baseline", "http://127.0.0.1:9", "--candidate", "http://127.0.0.1:9",
                 "--timeout", "2", "--retries", "0")
    assert result.exit_code == 2 and "unreachable" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_bench_reference_servers(cli, reference_servers):
    baseline, candidate = reference_servers.baseline, reference_servers.candidate
    result = cli("bench", "--baseline", baseline.url, "--candidate", candidate.url,
                 "--concurrency", "1,2", "--requests", "2", "--max-tokens", "8", "--format", "json")
    assert result.exit_code == 0, result.stderr
    bench = json.loads(result.stdout)
    assert [t["concurrency"] for t in bench["tiers"]] == [1, 2]
    for tier in bench["tiers"]:
        for side in ("baseline", "candidate"):
            assert tier[side]["requests"] == 2 and tier[side]["output_tokens"] > 0
            assert tier[side]["latency_p95_s"] >= tier[side]["latency_p50_s"] > 0
        assert tier["speedup"] == pytest.approx(
            tier["candidate"]["tokens_per_s"] / tier["baseline"]["tokens_per_s"], rel=1e-3)
        assert tier["tau"] > 1  # the candidate drafted: its counters moved during the tier
    losing = [t["concurrency"] for t in bench["tiers"] if t["speedup"] < 1]
    assert bench["crossover"] == (losing[0] if losing else None)


@pytest.mark.slow
def test_bench_by_duration_and_table(cli, reference_servers):
    baseline, candidate = reference_servers.baseline, reference_servers.candidate
    result = cli("bench", "--baseline", baseline.url, "--candidate", candidate.url,
                 "--concurrency", "2", "--duration", "0.2", "--max-tokens", "4", "--no-metrics")
    assert result.exit_code == 0, result.stderr
    assert "speculation per concurrency tier" in result.stdout
    assert "n/a" in result.stdout  # no tau without metrics


def streaming_app(usage: bool):
    """A fake engine that streams four one-token chunks (and the usage, when `usage`), and
    refuses a request that does not ask to stream."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def completions(request: Request):
        body = await request.json()
        if body.get("stream") is not True:
            return JSONResponse({"error": "this fake only streams"}, status_code=400)

        async def events():
            for piece in ("a", "b", "c", "d"):
                yield f"data: {json.dumps({'choices': [{'text': piece}]})}\n\n"
            if usage:
                yield f"data: {json.dumps({'choices': [], 'usage': {'completion_tokens': 7}})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])


def test_stream_reports_time_to_first_token(cli):
    from tests.support.endpoint_fakes import serve

    with serve(streaming_app(usage=False)) as baseline, serve(streaming_app(usage=True)) as spec:
        args = ("bench", "--baseline", baseline, "--candidate", spec, "--model", "m",
                "--concurrency", "1,2", "--requests", "3", "--no-metrics")
        streamed = cli(*args, "--stream", "--format", "json")
        refused = cli(*args)
    assert streamed.exit_code == 0, streamed.stderr
    for tier in json.loads(streamed.stdout)["tiers"]:
        assert tier["baseline"]["output_tokens"] == 3 * 4  # one token per text chunk
        assert tier["candidate"]["output_tokens"] == 3 * 7  # the streamed usage
        for side in ("baseline", "candidate"):
            assert 0 < tier[side]["ttft_p50_s"] <= tier[side]["ttft_p95_s"]
            assert tier[side]["ttft_p50_s"] <= tier[side]["latency_p95_s"]
    # Progress on stderr, the JSON alone on stdout: each endpoint's tier, in requests.
    for side in ("baseline", "candidate"):
        for tier in (1, 2):
            assert f"{side} at concurrency {tier}: 3/3 requests (" in streamed.stderr
    assert refused.exit_code == 2 and "HTTP 400" in refused.stderr
