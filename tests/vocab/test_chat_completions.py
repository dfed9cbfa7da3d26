"""Chat answers read into the same `Completion` as plain completions (llama.cpp and vLLM shapes)."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from dflash_guard.lossless.endpoint.client import parse_chat_completion
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.endpoint.run import EndpointOptions, run_endpoint_diff
from kernels_ref.prompts import Chat, PromptSpec
from tests.support.endpoint_fakes import serve


def chat(logprobs: dict, **extra) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": "ab"},
                         "logprobs": logprobs, "finish_reason": "length", **extra}]}


def test_llamacpp_chat_logprobs_carry_ids():
    entries = [{"id": 7, "token": "a", "logprob": -0.1,
                "top_logprobs": [{"id": 7, "logprob": -0.1}, {"id": 9, "logprob": -2.5}]},
               {"id": 8, "token": "b", "logprob": -0.2, "top_logprobs": []}]
    completion = parse_chat_completion(chat({"content": entries}))
    assert completion.text == "ab" and completion.token_ids == (7, 8)
    assert completion.at(0).top == ((7, -0.1), (9, -2.5))
    assert completion.finish_reason == "length"


def test_vllm_chat_logprobs_carry_token_id_strings():
    entries = [{"token": "token_id:7", "logprob": -0.1,
                "top_logprobs": [{"token": "token_id:7", "logprob": -0.1},
                                 {"token": "token_id:9", "logprob": -2.5}]},
               {"token": "token_id:8", "logprob": -0.2, "top_logprobs": []}]
    completion = parse_chat_completion(chat({"content": entries}, token_ids=[7, 8]))
    assert completion.token_ids == (7, 8)
    assert completion.at(0).top == ((7, -0.1), (9, -2.5))


@pytest.mark.parametrize("payload", [
    {"choices": []},
    {"choices": [{"message": "text"}]},
    {"choices": [{"message": {"content": 3}}]},
    {"choices": [{"message": {"content": "a"}, "logprobs": {"content": ["x"]}}]},
])
def test_malformed_chat_answers_are_errors(payload):
    with pytest.raises(ValueError):
        parse_chat_completion(payload)


def chat_engine(content: str, seen: list[str]) -> Starlette:
    """A llama.cpp-shaped chat endpoint answering ids 7, 8 with `content` as the text."""

    async def chat(request: Request) -> JSONResponse:
        seen.append(request.url.path)
        entries = [{"id": 7, "logprob": -0.1, "top_logprobs": []},
                   {"id": 8, "logprob": -0.2, "top_logprobs": []}]
        return JSONResponse({"choices": [{"message": {"content": content},
                                          "logprobs": {"content": entries},
                                          "finish_reason": "length"}]})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_a_chat_is_compared_by_ids_not_by_each_engines_parsed_text():
    seen: list[str] = []
    spec = PromptSpec("c", Chat(({"role": "user", "content": "Hi"},)), 2)
    with serve(chat_engine(" ab", seen)) as left, serve(chat_engine("ab", seen)) as right:
        engines = (EngineEndpoint(left, model="m", retries=0),
                   EngineEndpoint(right, model="m", retries=0))
        report = run_endpoint_diff(EndpointOptions(*engines), [spec])
    assert report.identical and report.results[0].compared_by == "token_ids"
    assert seen == ["/v1/chat/completions", "/v1/chat/completions"]
