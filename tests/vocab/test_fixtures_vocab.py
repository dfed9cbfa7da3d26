"""`fixtures make --vocab`: tiny pairs with the real vocabulary and the tree's chat template."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from dflash_guard.lossless.prompts import load_prompts
from kernels_ref.fixtures_vocab import make_vocab_pair
from kernels_ref.tokenizer import load_tokenizer
from kernels_ref.vocab import cached_tokenizer_json, real_vocab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

CHAT = Path(__file__).parent / "data" / "chat.jsonl"


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_the_pair_has_the_real_vocabulary_and_template(vocab_pair, tree, vocab_cache):
    name, target, drafter = vocab_pair
    vocab = real_vocab(name)
    config = json.loads((target / "config.json").read_text())
    assert config["vocab_size"] == vocab.size
    assert config["head_dim"] >= 32  # what vLLM serves
    assert config["model_type"] == {"qwen3": "qwen3", "llama3": "llama"}[name]
    template = tree / "models" / "templates" / vocab.template
    assert (target / "chat_template.jinja").read_bytes() == template.read_bytes()
    built = cached_tokenizer_json(tree / "models", vocab, vocab_cache)
    assert (target / "tokenizer.json").read_bytes() == built.read_bytes()
    mask = json.loads((drafter / "config.json").read_text())["dflash_config"]["mask_token_id"]
    assert mask == vocab.size - 1


def test_the_pair_is_the_same_bytes_on_every_run(vocab_pair, tree, vocab_cache, tmp_path):
    name, target, drafter = vocab_pair
    again_target, again_drafter = make_vocab_pair(tmp_path, name, tree, vocab_cache)
    assert digest(again_target) == digest(target)
    assert digest(again_drafter) == digest(drafter)


def test_chat_prompts_render_with_the_real_template(vocab_pair):
    name, target, _ = vocab_pair
    tokenizer = load_tokenizer(target)
    prompts = load_prompts(CHAT, tokenizer, real_vocab(name).size, target)
    first = prompts[0].ids
    if name == "llama3":  # the template writes BOS; encoding the render adds no second one
        assert first[0] == 128000 and first.count(128000) == 1
        assert tokenizer.decode(list(first)).endswith(
            "<|start_header_id|>assistant<|end_header_id|>\n\n")
    else:
        assert first[0] == 151644  # <|im_start|>
        assert tokenizer.decode(list(first)).endswith("<|im_start|>assistant\n")


def test_the_local_diff_of_chat_prompts_is_identical(vocab_pair, cli):
    _, target, drafter = vocab_pair
    result = cli("difftest", "local", "--target", str(target), "--drafter", str(drafter),
                 "--prompts", str(CHAT), "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["overall"]["identical"] is True and len(report["prompts"]) == 3


def test_the_cli_shows_each_step_and_writes_files_readable_by_all(
    cli, tree, vocab_cache, tmp_path, monkeypatch
) -> None:
    """Progress on stderr, step by step (the tokenizer comes from the cache: no rebuild), none
    with --quiet; every file 0644 whatever the umask, so an engine under another user reads it."""
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(vocab_cache.parent))
    out = tmp_path / "pair"
    old = os.umask(0o077)
    try:
        result = cli("fixtures", "make", out, "--vocab", "qwen3", "--llamacpp-tree", tree)
        quiet = cli("fixtures", "make", out, "--force", "--quiet", "--vocab", "qwen3",
                    "--llamacpp-tree", tree)
    finally:
        os.umask(old)
    assert result.exit_code == 0 and quiet.exit_code == 0, (result.stderr, quiet.stderr)
    steps = [line for line in result.stderr.splitlines() if ": done" in line]
    assert [step.split(":")[0] for step in steps] == [
        "tokenizer from ggml-vocab-qwen2.gguf (built once, then cached)",
        "seeded weights for 151,936 ids", "writing the pair"]
    assert quiet.stderr == ""
    for folder in (out / "target", out / "drafter"):
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
        assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes
