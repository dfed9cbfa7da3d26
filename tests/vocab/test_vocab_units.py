"""What the real-vocabulary code does without the llama.cpp tree: vector files, names, CLI usage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.lossless.chat import render_chat
from kernels_ref.errors import RunnerError
from kernels_ref.prompts import PromptSetError, read_prompt_set
from kernels_ref.vocab import read_vectors, real_vocab


def test_read_vectors_follows_test_tokenizer_0(tmp_path: Path):
    """Each string, the last one too, is followed by the separator line; the ids are one line
    per string (llama.cpp's tests/test-tokenizer-0.cpp)."""
    gguf = tmp_path / "ggml-vocab-x.gguf"
    Path(f"{gguf}.inp").write_text("a\n__ggml_vocab_test__\n\n\n__ggml_vocab_test__\n")
    Path(f"{gguf}.out").write_text(" 1 2\n 3\n")
    assert read_vectors(gguf) == [("a", [1, 2]), ("\n", [3])]
    Path(f"{gguf}.out").write_text(" 1 2\n")
    with pytest.raises(RunnerError, match="2 test strings but 1 id lines"):
        read_vectors(gguf)


def test_an_unknown_vocabulary_is_named():
    with pytest.raises(RunnerError, match="unknown vocabulary 'gpt5'; choose one of qwen3, llama3"):
        real_vocab("gpt5")


@pytest.mark.parametrize(("args", "message"), [
    (["--vocab", "qwen3"], "get them with `dflash-guard fixtures vocab fetch`"),  # no tree
    (["--llamacpp-tree", "."], "--llamacpp-tree is for --vocab"),
    (["--vocab", "qwen3", "--llamacpp-tree", ".", "--dflash2"], "no --dflash2"),
])
def test_fixtures_vocab_usage_errors(cli, tmp_path, args, message):
    result = cli("fixtures", "make", str(tmp_path / "out"), *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert not (tmp_path / "out" / "target").exists()


def test_fixtures_vocab_refuses_a_folder_without_the_gguf(cli, tmp_path):
    result = cli("fixtures", "make", str(tmp_path / "out"), "--vocab", "llama3",
                 "--llamacpp-tree", str(tmp_path))
    assert result.exit_code == 2
    assert "ggml-vocab-llama-bpe.gguf: no such vocab GGUF" in result.stderr


@pytest.mark.parametrize(("row", "message"), [
    ({"prompt": "x", "tools": []}, "'tools' and 'chat_template_kwargs' go with 'messages'"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": {}},
     "'tools' must be a list of objects"),
    ({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []},
     "'chat_template_kwargs' must be an object"),
])
def test_chat_fields_are_checked(tmp_path, row, message):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "a", **row}) + "\n")
    with pytest.raises(PromptSetError, match=f"p.jsonl:1: {message}"):
        read_prompt_set(path)


def test_tools_and_template_kwargs_reach_the_template(builtin_pair, tmp_path):
    target = tmp_path / "target"
    shutil.copytree(builtin_pair.target, target)
    (target / "chat_template.jinja").write_text(
        "{{ tools[0].name }}|{{ enable_thinking }}|{{ messages[0].content }}")
    messages = [{"role": "user", "content": "hi"}]
    assert render_chat(target, messages, [{"name": "f"}], {"enable_thinking": False}) == (
        "f|False|hi")
    with pytest.raises(InputError, match="chat_template_kwargs may not set 'messages'"):
        render_chat(target, messages, None, {"messages": []})


def test_a_chat_template_or_config_too_large_is_refused_not_read_whole(builtin_pair, tmp_path):
    """The chat template a diff renders is read up to 16 MiB, its tokenizer config up to the
    scan's JSON limit: a 17 MiB (sparse) template is one input error, not 17 MiB in memory."""
    target = tmp_path / "target"
    shutil.copytree(builtin_pair.target, target)
    with (target / "chat_template.jinja").open("wb") as handle:
        handle.truncate(17 * 1024 * 1024)
    with pytest.raises(InputError, match=r"chat template .*larger than 16,777,216 bytes"):
        render_chat(target, [{"role": "user", "content": "hi"}])
