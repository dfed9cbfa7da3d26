"""Issue 25 class 5 (N17, N20, N21): one HTTP reader for engines and metrics, with a body cap and
an overall deadline; numbers from an answer are bounded before they size anything."""

from __future__ import annotations

import asyncio

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from dflash_guard.lossless.endpoint import client as http
from dflash_guard.lossless.endpoint.client import CompletionClient, EndpointError
from dflash_guard.lossless.endpoint.metrics import acceptance_from_metrics, parse_prometheus
from tests.support.endpoint_fakes import serve


async def _drip(request):
    async def body():
        for _ in range(200):
            yield b" "
            await asyncio.sleep(0.05)
    return StreamingResponse(body(), media_type="application/json")


async def _huge(request):
    async def body():
        for _ in range(64):
            yield b" " * (1 << 16)
    return StreamingResponse(body(), media_type="application/json")


async def _huge_line(request):
    async def body():
        for _ in range(64):
            yield b"x" * (1 << 16)
    return StreamingResponse(body(), media_type="text/event-stream")


async def _huge_int(request):
    return Response(b'{"data":[{"id":' + b"9" * 5000 + b"}]}", media_type="application/json")


@pytest.fixture(scope="module")
def hostile():
    app = Starlette(routes=[Route("/drip/v1/models", _drip, methods=["GET", "POST"]),
                            Route("/huge/v1/models", _huge),
                            Route("/hugeint/v1/models", _huge_int),
                            Route("/line/v1/completions", _huge_line, methods=["POST"])])
    with serve(app) as base:
        yield base


def test_a_dripping_server_is_cut_at_the_overall_deadline(hostile):
    """The doc's drip: one byte every 50 ms never trips a per-read timeout; the deadline does."""
    with CompletionClient("candidate", hostile + "/drip", timeout=1, retries=0) as client, \
            pytest.raises(EndpointError, match="no complete answer within 1 s"):
        client.first_model()


def test_a_body_over_the_cap_is_refused(hostile, monkeypatch):
    monkeypatch.setattr(http, "MAX_BODY_BYTES", 1 << 20)
    with CompletionClient("candidate", hostile + "/huge", retries=0) as client, \
            pytest.raises(EndpointError, match="more than"):
        client.first_model()


def test_a_streamed_line_over_the_cap_is_refused(hostile, monkeypatch):
    monkeypatch.setattr(http, "MAX_LINE_BYTES", 1 << 20)
    with CompletionClient("candidate", hostile + "/line", retries=0) as client, \
            pytest.raises(EndpointError, match="line over"):
        list(client.stream_events(client.url, {"prompt": "x"}))


def test_an_integer_past_the_digit_limit_is_malformed_json_not_an_internal_error(hostile):
    with CompletionClient("candidate", hostile + "/hugeint", retries=0) as client, \
            pytest.raises(EndpointError, match="malformed JSON"):
        client.first_model()


@pytest.mark.parametrize("position", ["400000000", "1024", "9" * 5000])
def test_a_hostile_draft_position_sizes_nothing(position):
    """The doc's `position="400000000"`: no curve, never a list of that length."""
    page = ("vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_accepted_tokens_total 5\n"
            "vllm:spec_decode_num_draft_tokens_total 70\n"
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{position}"}} 1\n')
    figures = acceptance_from_metrics(parse_prometheus(""), parse_prometheus(page))
    assert figures is not None and figures.mean_acceptance_length == pytest.approx(1.5)
    assert not figures.accepted_per_position


def test_a_plain_metrics_page_still_reads(hostile):
    async def metrics(request):
        return PlainTextResponse("vllm:spec_decode_num_drafts_total 1\n")

    with serve(Starlette(routes=[Route("/metrics", metrics)])) as base, \
            CompletionClient("metrics", base) as client:
        assert "spec_decode" in client.get_text(base + "/metrics")


@pytest.mark.parametrize("value", ["NaN", "+Inf"])
def test_non_finite_counters_warn_instead_of_silencing_every_warning(value):
    from dflash_guard.lossless.endpoint.metrics import acceptance_warnings

    page = (f"vllm:spec_decode_num_drafts_total {value}\n"
            "vllm:spec_decode_num_accepted_tokens_total 5\n"
            "vllm:spec_decode_num_draft_tokens_total 70\n")
    figures = acceptance_from_metrics(parse_prometheus(""), parse_prometheus(page))
    assert any("cannot tell" in w for w in acceptance_warnings(figures))


def test_a_dripping_stream_is_cut_at_the_overall_deadline(hostile):
    with CompletionClient("candidate", hostile + "/drip", timeout=1, retries=0) as client, \
            pytest.raises(EndpointError, match="stream not done within 1 s"):
        list(client.stream_events(hostile + "/drip/v1/models", {"prompt": "x"}))
