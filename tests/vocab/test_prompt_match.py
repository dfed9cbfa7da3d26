"""Our prompt ids against the engine's, before any decoding (fake llama.cpp and vLLM servers).

A fake engine renders `messages` with the same template as ours and tokenizes with the target's
own tokenizer, optionally changing one thing; the reference diff must then stop with a prompt
mismatch naming the position and both sides' text, and never ask for a completion.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from dflash_guard.lossless.chat import render_chat
from dflash_guard.lossless.endpoint.client import CompletionClient
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.options import ReferenceOptions
from dflash_guard.lossless.prompt_match import engine_prompt_ids, first_mismatch
from dflash_guard.lossless.reference_diff import run_reference_diff
from kernels_ref.prompts import Chat
from kernels_ref.tokenizer import load_tokenizer
from tests.support.endpoint_fakes import serve

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


def fake_engine(target: Path, flavour: str, seen: list[str], damage: str = "",
                other_tokenizer: bool = False) -> Starlette:
    """llama.cpp (`/apply-template` + `/tokenize`) or vLLM (`/tokenize` with messages); with
    `damage` the rendering differs, with `other_tokenizer` plain text is tokenized otherwise."""
    tokenizer = load_tokenizer(target)

    def render(body: dict[str, Any]) -> str:
        text = render_chat(target, body["messages"], body.get("tools"),
                           body.get("chat_template_kwargs"))
        return text.replace("Hi there", damage) if damage else text

    async def apply_template(request: Request) -> JSONResponse:
        seen.append("/apply-template")
        return JSONResponse({"prompt": render(await request.json())})

    async def tokenize(request: Request) -> JSONResponse:
        seen.append("/tokenize")
        body = await request.json()
        if "messages" in body:
            ids = tokenizer.encode(render(body), add_special_tokens=False)
        else:
            text = body["content"] if flavour == "llamacpp" else body["prompt"]
            ids = tokenizer.encode(text, add_special_tokens=False)
            ids = ids[::-1] if other_tokenizer else ids
        return JSONResponse({"tokens": ids})

    async def anything(request: Request) -> JSONResponse:
        seen.append(request.url.path)
        return JSONResponse({"data": [{"id": "m"}]} if request.url.path == "/v1/models" else {})

    routes = [Route("/tokenize", tokenize, methods=["POST"]),
              Route("/v1/models", anything), Route("/v1/completions", anything, methods=["POST"])]
    if flavour == "llamacpp":
        routes += [Route("/apply-template", apply_template, methods=["POST"]),
                   Route("/props", anything)]
    return Starlette(routes=routes)


def test_first_mismatch_names_the_position_and_both_texts():
    decode = "".join  # ids stand for their text here
    assert first_mismatch("p", list("abc"), list("abc"), decode) is None
    found = first_mismatch("p", list("abcdefgh"), list("abXdefgh"), decode)
    assert (found.position, found.ours, found.engine) == (2, "cdef", "Xdef")
    shorter = first_mismatch("p", list("abc"), list("abcd"), decode)
    assert (shorter.position, shorter.ours, shorter.engine) == (3, "", "d")
    assert "prompt mismatch before any decoding: prompt 'p' differs at token 3" in (
        shorter.message())


@pytest.mark.parametrize("flavour", ["llamacpp", "vllm"])
def test_engine_prompt_ids_asks_each_engine_its_way(builtin_pair, flavour):
    target, _ = builtin_pair.target, builtin_pair.drafter
    seen: list[str] = []
    chat = Chat(tuple(MESSAGES), (), (("enable_thinking", False),))
    with serve(fake_engine(target, flavour, seen)) as url, CompletionClient("c", url) as client:
        ids = engine_prompt_ids(client, chat)
    ours = load_tokenizer(target).encode(render_chat(target, MESSAGES), add_special_tokens=False)
    assert ids == ours
    assert seen == (["/apply-template", "/tokenize"] if flavour == "llamacpp" else ["/tokenize"])


def write_chat(path: Path) -> Path:
    path.write_text(json.dumps({"id": "c1", "messages": MESSAGES, "max_new_tokens": 4}) + "\n")
    return path


@pytest.mark.parametrize("flavour", ["llamacpp", "vllm"])
def test_a_different_rendering_stops_the_reference_diff_before_decoding(
        builtin_pair, tmp_path, flavour):
    target, _ = builtin_pair.target, builtin_pair.drafter
    seen: list[str] = []
    with serve(fake_engine(target, flavour, seen, damage="Hi  there")) as url:
        report = run_reference_diff(ReferenceOptions(target, EngineEndpoint(url),
                                                     prompts=write_chat(tmp_path / "c.jsonl")))
    assert report.verdict == "refused" and not report.passed and report.results == ()
    assert report.refused.startswith("prompt mismatch before any decoding: prompt 'c1' differs")
    assert "at token 27" in report.refused  # byte ids: "Hi " is equal, then "t" vs " "
    assert report.refused.endswith("ours 'ther', the engine's ' the'")
    assert "/v1/completions" not in seen


@pytest.mark.parametrize("flavour", ["llamacpp", "vllm"])
def test_an_engine_tokenizing_otherwise_is_refused_before_any_prompt(builtin_pair, tmp_path,
                                                                    flavour):
    target, _ = builtin_pair.target, builtin_pair.drafter
    seen: list[str] = []
    with serve(fake_engine(target, flavour, seen, other_tokenizer=True)) as url:
        report = run_reference_diff(ReferenceOptions(target, EngineEndpoint(url),
                                                     prompts=write_chat(tmp_path / "c.jsonl")))
    assert report.verdict == "refused" and report.results == ()
    ours = load_tokenizer(target).encode("Hello world", add_special_tokens=False)
    assert report.refused == ("the engine's tokenizer is not the target's: 'Hello world' is "
                              f"{ours[::-1]} there, {ours} here")
    assert "/v1/completions" not in seen and "/apply-template" not in seen
