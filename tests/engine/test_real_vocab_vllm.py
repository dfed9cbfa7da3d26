"""Real vocabularies and chat templates through vLLM (the pinned CPU build).

Per real-vocabulary pair: every `messages` prompt renders and tokenizes to our ids in vLLM (its
`/tokenize` with messages, and the prompt ids its `/v1/chat/completions` reports); `difftest
--reference` on the chat prompts: identical; a target with a lossy tokenizer: refused by vLLM's
own `/tokenize` before any prompt. The engine install is part of the suite (never a skip).
"""

from __future__ import annotations

import httpx2
import pytest

from dflash_guard.lossless.endpoint.client import CompletionClient
from dflash_guard.lossless.prompt_match import engine_prompt_ids, first_mismatch
from dflash_guard.lossless.prompts import load_prompts, read_prompts
from kernels_ref.fixtures_vocab import make_vocab_pair
from kernels_ref.tokenizer import load_tokenizer
from tests.engine.test_real_vocab_llamacpp import CHAT, cli_json, lossy_copy
from tests.support.llamacpp import session_cache_dir, source_tree
from tests.support.vllm import install, vllm_server

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def python():
    return install()


@pytest.fixture(scope="module", params=["qwen3", "llama3"])
def served(request, python, tmp_path_factory):
    """(target, vLLM server) of one real-vocabulary pair."""
    folder = tmp_path_factory.mktemp(request.param)
    target, _ = make_vocab_pair(folder, request.param, source_tree(),
                                session_cache_dir() / "vocab")
    with vllm_server(python, target) as server:
        yield target, server


def test_vllm_renders_every_chat_to_our_ids(served):
    target, server = served
    tokenizer = load_tokenizer(target)
    prompts = load_prompts(CHAT, tokenizer, 10**6, target)
    specs = read_prompts(CHAT, chat=True)
    with CompletionClient("vllm", server.url) as client:
        for spec, prompt in zip(specs, prompts, strict=True):
            theirs = engine_prompt_ids(client, spec.prompt)
            assert first_mismatch(prompt.id, prompt.ids, theirs, tokenizer.decode) is None
            body = {"model": "m", "messages": list(spec.prompt.messages), "max_tokens": 1,
                    "temperature": 0, "return_token_ids": True,
                    "chat_template_kwargs": dict(spec.prompt.template_kwargs)}
            if spec.prompt.tools:
                body.update(tools=list(spec.prompt.tools), tool_choice="none")
            answer = httpx2.post(server.url + "/v1/chat/completions", json=body,
                                 timeout=300).json()
            assert answer["prompt_token_ids"] == list(prompt.ids), prompt.id


def test_reference_diff_of_chats_is_identical(served):
    target, server = served
    code, report = cli_json("difftest", "reference", "--target", str(target),
                            "--candidate", server.url, "--prompts", str(CHAT))
    assert code == 0 and report["verdict"] == "identical" and report["prompts"] == 6, report


def test_a_target_with_a_lossy_tokenizer_is_refused_before_any_prompt(served, tmp_path):
    target, server = served
    lossy, probe = lossy_copy(target, tmp_path / "lossy")
    code, report = cli_json("difftest", "reference", "--target", str(lossy),
                            "--candidate", server.url, "--prompts", str(CHAT))
    assert code == 1 and report["verdict"] == "refused" and report["prompts"] == 0
    assert report["refused"].startswith(f"the engine's tokenizer is not the target's: {probe!r}")
