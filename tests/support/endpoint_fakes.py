"""Fake OpenAI-compatible engines for the endpoint tests: starlette + uvicorn on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route


def vllm_choice(ids: list[int], tops: dict[int, dict[int, float]] | None = None,
                finish: str = "length") -> dict[str, Any]:
    """A vLLM-style choice: logprob tokens as `token_id:N`, top_logprobs keyed the same way."""
    tops = tops or {}
    return {
        "index": 0,
        "text": "".join(chr(ord("a") + i % 26) for i in ids),
        "finish_reason": finish,
        "logprobs": {
            "tokens": [f"token_id:{i}" for i in ids],
            "token_logprobs": [-0.1 for _ in ids],
            "top_logprobs": [
                {f"token_id:{k}": v for k, v in tops.get(pos, {i: -0.1}).items()}
                for pos, i in enumerate(ids)
            ],
        },
    }


def text_choice(pieces: list[str], tops: dict[int, dict[str, float]] | None = None) -> dict:
    """An engine that reports token strings only (no ids)."""
    tops = tops or {}
    return {
        "index": 0,
        "text": "".join(pieces),
        "finish_reason": "length",
        "logprobs": {
            "tokens": pieces,
            "top_logprobs": [tops.get(pos, {p: -0.1}) for pos, p in enumerate(pieces)],
        },
    }


@dataclass
class Behaviour:
    """What the fake answers; tests change it, the `fake_pair` fixture resets it."""

    choices: dict[str, dict[str, Any]] = field(default_factory=dict)  # prompt -> choice
    statuses: list[int] = field(default_factory=list)  # answered (and consumed) before a real one
    always_status: int | None = None
    malformed: bool = False
    no_choices: bool = False
    hang_s: float = 0.0
    delay_s: float = 0.0
    require_key: str | None = None
    metrics: list[str] = field(default_factory=list)  # successive /metrics bodies
    seen_auth: list[str | None] = field(default_factory=list)
    seen_bodies: list[dict] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0


def make_app(state: Behaviour) -> Starlette:
    lock = threading.Lock()

    async def completions(request: Request) -> Response:
        state.seen_auth.append(request.headers.get("authorization"))
        body = await request.json()
        state.seen_bodies.append(body)
        expected = f"Bearer {state.require_key}"
        if state.require_key and request.headers.get("authorization") != expected:
            return JSONResponse({"error": "bad key"}, status_code=401)
        if state.statuses:
            return JSONResponse({"error": "busy"}, status_code=state.statuses.pop(0))
        if state.always_status:
            return JSONResponse({"error": "down"}, status_code=state.always_status)
        if state.hang_s:
            await asyncio.sleep(state.hang_s)
        with lock:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            await asyncio.sleep(state.delay_s)
        finally:
            with lock:
                state.in_flight -= 1
        if state.malformed:
            return PlainTextResponse('{"choices": [ {"text": "tru', media_type="application/json")
        if state.no_choices:
            return JSONResponse({"object": "text_completion"})
        choice = state.choices[body["prompt"]]
        payload = {"object": "text_completion", "model": body["model"], "choices": [choice]}
        return JSONResponse(payload)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(state.metrics.pop(0) if state.metrics else "")

    return Starlette(routes=[
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models),
        Route("/metrics", metrics),
    ])


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run `app` with uvicorn in a thread on 127.0.0.1 (a free port); yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="error", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
