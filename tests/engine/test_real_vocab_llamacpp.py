"""Real vocabularies and chat templates through llama.cpp (`llama-server --jinja`).

Per real-vocabulary pair (Qwen3: the qwen2 vocabulary and `Qwen-Qwen3-0.6B.jinja`; Llama 3:
`llama-bpe` and `meta-llama-Llama-3.1-8B-Instruct.jinja`), converted to f32 GGUF with the tree's
own converter:
- every `messages` prompt (system, user, multi-turn, tools, enable_thinking off/on) renders and
  tokenizes to the same ids in llama.cpp (`/apply-template`, `/tokenize`) as ours;
- `difftest reference --gguf` of the baseline server: identical;
- `difftest` endpoint mode on `/v1/chat/completions`, baseline vs DFlash server: identical;
- a GGUF whose pre-tokenizer the lossy way says `default` is refused before any prompt, and a
  target whose tokenizer lost `ignore_merges` (transformers' conversion of llama-bpe) is refused
  by the engine's own `/tokenize` before any prompt.

The engine build is part of the suite: when it fails, these tests fail (never skip).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_guard.lossless.endpoint.client import CompletionClient
from dflash_guard.lossless.prompt_match import engine_prompt_ids, first_mismatch
from dflash_guard.lossless.prompts import load_prompts, read_prompts
from kernels_ref.fixtures_vocab import make_vocab_pair
from kernels_ref.tokenizer import load_tokenizer
from tests.support.gguf_py import new_metadata
from tests.support.llamacpp import (
    build_server,
    convert,
    llama_server,
    session_cache_dir,
    source_tree,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

CHAT = Path(__file__).parents[1] / "vocab" / "data" / "chat_real.jsonl"
CONTEXT = 512


def cli_json(*args: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "dflash_guard", *args, "--format", "json"],
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.fixture(scope="module")
def engine() -> Path:
    return build_server()


@pytest.fixture(scope="module", params=["qwen3", "llama3"])
def pair(request, tmp_path_factory):
    """(target, drafter, target.gguf, drafter.gguf) of one real-vocabulary pair."""
    folder = tmp_path_factory.mktemp(request.param)
    target, drafter = make_vocab_pair(folder / "hf", request.param, source_tree(),
                                      session_cache_dir() / "vocab")
    gguf = folder / "gguf"
    convert(target, gguf / "target.gguf")
    convert(drafter, gguf / "drafter.gguf", target_dir=target)
    return target, drafter, gguf / "target.gguf", gguf / "drafter.gguf"


@pytest.fixture(scope="module")
def servers(engine, pair):
    _, _, target_gguf, drafter_gguf = pair
    with (llama_server(engine, target_gguf, context=CONTEXT, extra=("--jinja",)) as baseline,
          llama_server(engine, target_gguf, drafter_gguf, context=CONTEXT,
                       extra=("--jinja",)) as candidate):
        yield baseline, candidate


def test_llamacpp_renders_every_chat_to_our_ids(pair, servers):
    target = pair[0]
    tokenizer = load_tokenizer(target)
    prompts = load_prompts(CHAT, tokenizer, 10**6, target)
    specs = read_prompts(CHAT, chat=True)
    assert len(prompts) == 6
    with CompletionClient("baseline", servers[0].url) as client:
        for spec, prompt in zip(specs, prompts, strict=True):
            theirs = engine_prompt_ids(client, spec.prompt)
            assert first_mismatch(prompt.id, prompt.ids, theirs, tokenizer.decode) is None


def test_reference_diff_of_chats_is_identical(pair, servers):
    target, _, target_gguf, _ = pair
    code, report = cli_json("difftest", "reference", "--target", str(target), "--candidate",
                            servers[0].url, "--gguf", str(target_gguf), "--prompts", str(CHAT))
    assert code == 0 and report["verdict"] == "identical", report
    assert report["prompts"] == 6


def test_chat_endpoint_diff_baseline_vs_dflash_is_identical(servers):
    baseline, candidate = servers
    code, report = cli_json("difftest", "endpoint", "--baseline", baseline.url, "--candidate",
                            candidate.url, "--prompts", str(CHAT), "--concurrency", "1")
    assert code == 0 and report["identical"], report
    assert {r["compared_by"] for r in report["results"]} == {"token_ids"}
    assert report["prompts"] == 6


def test_a_gguf_with_the_default_pre_tokenizer_is_refused(pair, servers, tmp_path):
    target, _, target_gguf, _ = pair
    damaged = new_metadata(target_gguf, tmp_path / "default-pre.gguf", "--pre-tokenizer",
                           "default")
    code, report = cli_json("difftest", "reference", "--target", str(target), "--candidate",
                            servers[0].url, "--gguf", str(damaged), "--prompts", str(CHAT))
    assert code == 1 and report["verdict"] == "refused" and report["prompts"] == 0
    assert "the GGUF's pre-tokenizer is default" in report["refused"]


def lossy_copy(target: Path, out: Path) -> tuple[Path, str]:
    """A copy of `target` whose tokenizer is converted the lossy way, and the probe text it
    gets wrong: Llama 3 without `ignore_merges` (transformers' GGUF conversion), Qwen3 with
    GPT-2's default split pattern instead of its own (a converter that does not know the
    pre-tokenizer, as llama.cpp's `default`)."""
    shutil.copytree(target, out)
    path = out / "tokenizer.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    if document["model"].get("ignore_merges"):
        document["model"]["ignore_merges"] = False
        probe = "Cửa Việt ÁÉÍ"
    else:
        document["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                                     "trim_offsets": True, "use_regex": True}
        probe = "ied 4 ½ months"
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return out, probe


def test_a_target_with_a_lossy_tokenizer_is_refused_before_any_prompt(pair, servers, tmp_path):
    lossy, probe = lossy_copy(pair[0], tmp_path / "lossy")
    code, report = cli_json("difftest", "reference", "--target", str(lossy), "--candidate",
                            servers[0].url, "--prompts", str(CHAT))
    assert code == 1 and report["verdict"] == "refused" and report["prompts"] == 0
    assert report["refused"].startswith(f"the engine's tokenizer is not the target's: {probe!r}")


def write_chat(path: Path, row: dict) -> Path:
    path.write_text(json.dumps({**row, "max_new_tokens": 4}) + "\n", encoding="utf-8")
    return path


def test_llamacpp_dates_the_llama31_prompt_itself(pair, servers, tmp_path):
    """llama.cpp sets the template variable `date_string` to today (common/chat.cpp); the
    Llama 3.1 template's own default, which transformers and vLLM render, is 26 Jul 2024. So an
    unpinned Llama 3.1 chat is a prompt mismatch at the date (chat_real.jsonl pins it with
    `chat_template_kwargs`); Qwen3's template has no date."""
    target = pair[0]
    chat = write_chat(tmp_path / "date.jsonl",
                      {"id": "date", "messages": [{"role": "user", "content": "Hi"}]})
    code, report = cli_json("difftest", "reference", "--target", str(target), "--candidate",
                            servers[0].url, "--prompts", str(chat))
    if json.loads((target / "config.json").read_text())["model_type"] == "qwen3":
        assert code == 0 and report["verdict"] == "identical"
        return
    assert code == 1 and report["verdict"] == "refused" and report["prompts"] == 0
    assert re.fullmatch(r"prompt mismatch before any decoding: prompt 'date' differs at token 19 "
                        r"\(ours (\d+) ids, the engine's \1\): ours '26 Jul 202', the engine's "
                        r"'\d\d [A-Z][a-z]{2} 20\d'", report["refused"]), report["refused"]
