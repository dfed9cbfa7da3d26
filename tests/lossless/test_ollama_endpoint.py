"""The endpoint diff against ollama's OpenAI-compatible API: its `/v1/completions` and
`/v1/chat/completions` answer logprobs as chat-style `content` entries of token text, logprob and
bytes, no ids (ollama `openai/openai.go` `ChoiceLogprobs`, `api.Logprob`); fakes of that shape
on 127.0.0.1 stand in for the server, which does not run here (docs/limits.md)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from dflash_guard.lossless.endpoint.client import parse_chat_completion, parse_completion
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.endpoint.run import EndpointOptions, run_endpoint_diff
from kernels_ref.prompts import Chat, PromptSpec
from tests.support.endpoint_fakes import serve


def entry(token: str, logprob: float, *others: tuple[str, float]) -> dict[str, Any]:
    """One `api.Logprob`: `token`, `logprob`, `bytes`, `top_logprobs` of the same fields."""
    tops = [{"token": t, "logprob": v, "bytes": list(t.encode())}
            for t, v in ((token, logprob), *others)]
    return {"token": token, "logprob": logprob, "bytes": list(token.encode()),
            "top_logprobs": tops}


def ollama_completion(pieces: list[str]) -> dict[str, Any]:
    """What ollama's `/v1/completions` answers (`Completion`, `CompleteChunkChoice`)."""
    return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m:latest",
            "system_fingerprint": "fp_ollama",
            "choices": [{"text": "".join(pieces), "index": 0, "finish_reason": "length",
                         "logprobs": {"content": [entry(p, -0.1, ("zz", -3.0)) for p in pieces]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": len(pieces), "total_tokens": 5}}


def test_ollama_completion_logprobs_are_read_as_token_text() -> None:
    completion = parse_completion(ollama_completion(["Hel", "lo"]))
    assert completion.text == "Hello" and completion.token_ids is None
    assert completion.token_texts == ("Hel", "lo")
    assert completion.at(0).top == (("Hel", -0.1), ("zz", -3.0))
    assert [p.logprob for p in completion.logprobs] == [-0.1, -0.1]


def test_ollama_chat_logprobs_are_read_as_token_text() -> None:
    payload = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"},
                            "finish_reason": "stop", "logprobs": {"content": [entry("Hi", -0.2)]}}]}
    completion = parse_chat_completion(payload)
    assert completion.token_texts == ("Hi",) and completion.finish_reason == "stop"


@pytest.mark.parametrize("content", [[{"token": "a", "logprob": "x"}],
                                     [{"token": "a", "logprob": -1, "top_logprobs": "x"}]])
def test_a_malformed_ollama_answer_is_an_error(content) -> None:
    payload = ollama_completion(["a"])
    payload["choices"][0]["logprobs"]["content"] = content
    with pytest.raises(ValueError):
        parse_completion(payload)


def ollama_engine(pieces: list[str], seen: list[dict[str, Any]]) -> Starlette:
    async def completions(request: Request) -> JSONResponse:
        seen.append(await request.json())
        return JSONResponse(ollama_completion(pieces))

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])


def test_the_endpoint_diff_compares_two_ollama_servers() -> None:
    seen: list[dict[str, Any]] = []
    spec = PromptSpec("p", "Say hello", 2)
    with serve(ollama_engine(["Hel", "lo"], seen)) as left, \
            serve(ollama_engine(["Hel", "lo"], seen)) as right:
        same = run_endpoint_diff(EndpointOptions(EngineEndpoint(left, model="m", retries=0),
                                                 EngineEndpoint(right, model="m", retries=0)),
                                 [spec])
    assert same.identical
    assert seen[0]["logprobs"] == 5 and seen[0]["temperature"] == 0  # ollama: *int, greedy
    with serve(ollama_engine(["Hel", "lo"], seen)) as left, \
            serve(ollama_engine(["Hel", "p"], seen)) as right:
        differ = run_endpoint_diff(EndpointOptions(EngineEndpoint(left, model="m", retries=0),
                                                   EngineEndpoint(right, model="m", retries=0)),
                                   [spec])
    assert not differ.identical


def test_a_chat_prompt_goes_to_ollamas_chat_endpoint() -> None:
    seen: list[str] = []

    async def chat(request: Request) -> JSONResponse:
        seen.append(request.url.path)
        body = await request.json()
        assert body["logprobs"] is True and body["top_logprobs"] == 5
        return JSONResponse({"choices": [{"index": 0, "finish_reason": "length",
                                          "message": {"role": "assistant", "content": "Hi"},
                                          "logprobs": {"content": [entry("Hi", -0.2)]}}]})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    spec = PromptSpec("c", Chat(({"role": "user", "content": "Hi"},)), 1)
    with serve(app) as left, serve(app) as right:
        report = run_endpoint_diff(EndpointOptions(EngineEndpoint(left, model="m", retries=0),
                                                   EngineEndpoint(right, model="m", retries=0)),
                                   [spec])
    assert report.identical and seen == ["/v1/chat/completions"] * 2
