"""Text prompts through each target's own `tokenizer.json` (HF `tokenizers`), the built-in
byte-level one included; `messages` prompts through the target's checked chat template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.lossless.chat import render_chat
from dflash_guard.lossless.prompts import read_prompts
from kernels_ref.prompts import DEFAULT_PROMPTS, Chat, read_prompt_set
from kernels_ref.serve import ReferenceEngine
from kernels_ref.tokenizer import load_tokenizer
from tests.support.kernels import random_pair
from tests.support.word_tokenizer import SPECIALS, write_word_tokenizer


def test_builtin_byte_level_tokenizer_is_a_tokenizers_file(builtin_pair) -> None:
    tokenizer = load_tokenizer(builtin_pair.target)
    assert tokenizer is not None
    for spec in read_prompt_set(DEFAULT_PROMPTS):
        if isinstance(spec.prompt, str):  # id b is byte b, as the pair was trained
            assert tokenizer.encode(spec.prompt) == list(spec.prompt.encode("utf-8"))
            assert tokenizer.decode(tokenizer.encode(spec.prompt)) == spec.prompt
    assert tokenizer.decode([104, 300]) == "h<|id:300|>"


@pytest.mark.parametrize(
    ("add_bos", "expected"),
    [
        (None, [250, 10, 251, 11]),  # the post-processor's BOS, as transformers keeps it
        (True, [250, 10, 251, 11]),
        (False, [10, 251, 11]),  # add_bos_token false removes what the post-processor adds
    ],
)
def test_independent_tokenizer_with_specials_and_bos(
    tmp_path: Path, add_bos: bool | None, expected: list[int]
) -> None:
    write_word_tokenizer(tmp_path, add_bos=add_bos)
    tokenizer = load_tokenizer(tmp_path)
    assert tokenizer is not None
    assert tokenizer.encode("hello </s> world") == expected
    assert tokenizer.encode("hello", add_special_tokens=False) == [10]
    assert tokenizer.token_id("</s>") == SPECIALS["</s>"]
    assert tokenizer.token_id("hello world") is None
    assert tokenizer.decode([250, 10, 251, 5]) == "<s> hello </s><|id:5|>"  # 5: no such token
    assert tokenizer.encode("unknownword") == [250, SPECIALS["<unk>"]][(add_bos is False):]


def test_difftest_runs_default_text_prompts_on_an_independent_pair(cli, tmp_path: Path) -> None:
    target, drafter = random_pair(tmp_path, seed=3)
    write_word_tokenizer(target)
    result = cli("difftest", "local", "--target", target, "--drafter", drafter,
                 "--max-new-tokens", "8",
                 "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["overall"]["identical"] is True
    first = report["prompts"][0]
    assert first["prompt_ids"][0] == SPECIALS["<s>"]
    assert len(first["output_ids"]) == 8 and sum(first["acceptance"]) == 7  # prefill's one


def test_messages_prompts_render_the_checked_template(cli, tmp_path: Path) -> None:
    target, drafter = random_pair(tmp_path, seed=3)
    tokenizer = write_word_tokenizer(target)
    prompts = tmp_path / "chat.jsonl"
    messages = [{"role": "user", "content": "Hi there"}]
    prompts.write_text(json.dumps({"id": "chat", "messages": messages}) + "\n")
    result = cli("difftest", "local", "--target", target, "--drafter", drafter, "--prompts",
                 prompts,
                 "--max-new-tokens", "6", "--format", "json")
    assert result.exit_code == 0, result.stderr
    text = render_chat(target, messages)
    assert text == "<|im_start|> user Hi there <|im_end|> <|im_start|> assistant"
    expected = tokenizer.encode(text, add_special_tokens=False).ids  # no BOS added on top
    assert json.loads(result.stdout)["prompts"][0]["prompt_ids"] == expected == [252, 16, 19, 20,
                                                                                 253, 252, 17]


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",  # CVE-2024-34359's shape
        "{{ messages|attr('\\x5f\\x5fclass\\x5f\\x5f') }}",
    ],
)
def test_a_template_the_scan_flags_is_never_rendered(cli, tmp_path: Path, template: str) -> None:
    target, drafter = random_pair(tmp_path, seed=3)
    write_word_tokenizer(target, chat_template=template)
    prompts = tmp_path / "chat.jsonl"
    prompts.write_text('{"id": "c", "messages": [{"role": "user", "content": "Hi"}]}\n')
    result = cli("difftest", "local", "--target", target, "--drafter", drafter, "--prompts",
                 prompts)
    assert result.exit_code == 2
    assert "chat.jsonl:1" in result.stderr and "refused by the scan" in result.stderr


def test_messages_are_refused_where_nothing_renders_them(cli, tmp_path: Path) -> None:
    target, drafter = random_pair(tmp_path, seed=3)
    config = json.loads((target / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    prompts = tmp_path / "chat.jsonl"
    prompts.write_text('{"id": "c", "messages": [{"role": "user", "content": "Hi"}]}\n')
    result = cli("difftest", "local", "--target", target, "--drafter", drafter, "--prompts",
                 prompts)
    assert result.exit_code == 2 and "no chat template" in result.stderr
    prompts.write_text('{"id": "c", "messages": []}\n')
    result = cli("difftest", "local", "--target", target, "--drafter", drafter, "--prompts",
                 prompts)
    assert result.exit_code == 2 and "non-empty list" in result.stderr


def test_reference_server_takes_text_for_any_tokenizer(tmp_path: Path) -> None:
    target, drafter = random_pair(tmp_path, seed=3)
    write_word_tokenizer(target)
    engine = ReferenceEngine(target, drafter)
    body = {"prompt": "hello world", "max_tokens": 3, "temperature": 0, "return_token_ids": True}
    choice = engine.complete(body)["choices"][0]
    assert choice["prompt_token_ids"] == [250, 10, 11]
    assert len(choice["token_ids"]) == 3
    (target / "tokenizer.json").unlink()
    bare = ReferenceEngine(target, drafter)
    with pytest.raises(ValueError, match="give 'prompt_ids'"):
        bare.complete(body)


def test_endpoint_prompt_reader_refuses_messages(tmp_path: Path) -> None:
    prompts = tmp_path / "chat.jsonl"
    prompts.write_text('{"id": "c", "messages": [{"role": "user", "content": "Hi"}]}\n')
    with pytest.raises(InputError, match="chat.jsonl:1: 'messages' prompts are for the local"):
        read_prompts(prompts)
    assert read_prompts(prompts, chat=True)[0].prompt == Chat(({"role": "user", "content": "Hi"},))


@pytest.mark.parametrize("add_bos", [None, True])
def test_text_and_chat_ids_equal_transformers(tmp_path: Path, builtin_pair, add_bos) -> None:
    """(add_bos_token false with a BOS-adding post-processor is left out: transformers' generic
    PreTrainedTokenizerFast keeps the BOS, the Llama/Gemma classes drop it, as kernels_ref does.)"""
    from transformers import AutoTokenizer

    word = tmp_path / "word"
    word.mkdir()
    write_word_tokenizer(word, add_bos=add_bos)
    messages = [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "hello world"},
        {"role": "user", "content": "x ("},
    ]
    for folder in (word, builtin_pair.target):
        theirs = AutoTokenizer.from_pretrained(folder)
        ours = load_tokenizer(folder)
        assert ours is not None
        chat = theirs.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = chat["input_ids"]  # transformers 5 returns a BatchEncoding
        text = render_chat(folder, messages)
        assert ours.encode(text, add_special_tokens=False) == list(ids)
        assert ours.encode("hello world x (") == theirs("hello world x (")["input_ids"]
