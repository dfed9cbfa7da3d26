"""Templates under `additional_chat_templates/`: transformers loads them (a `default.jinja` there
replaces `chat_template.jinja`, `tool_use` is picked when a prompt has tools), so the scan checks
them and `render_chat` picks the one transformers applies."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_guard.lossless.chat import render_chat
from dflash_guard.scan import scan_paths
from tests.support.word_tokenizer import write_word_tokenizer

DEFAULT = ("{% for m in messages %}<|im_start|> {{ m.role }} {{ m.content }} <|im_end|> "
           "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant{% endif %}")
TOOL_USE = ("{% for t in tools %}<|im_start|> system {{ t.function.name }} <|im_end|> "
            "{% endfor %}" + DEFAULT)
MESSAGES = [{"role": "user", "content": "Hi there"}]
TOOLS = [{"type": "function", "function": {"name": "hello", "description": "world",
                                           "parameters": {"type": "object", "properties": {}}}}]


@pytest.mark.parametrize("layout", ["jinja+tool_use", "only-additional", "default-override"])
def test_render_chat_picks_the_template_transformers_applies(tmp_path: Path,
                                                             layout: str) -> None:
    from transformers import AutoTokenizer

    write_word_tokenizer(tmp_path, chat_template="{{ 'from tokenizer_config' }}")
    extra = tmp_path / "additional_chat_templates"
    extra.mkdir()
    if layout != "only-additional":
        (tmp_path / "chat_template.jinja").write_text(DEFAULT.replace("assistant", "world"))
    if layout != "default-override":
        (extra / "tool_use.jinja").write_text(TOOL_USE)
    if layout != "jinja+tool_use":
        (extra / "default.jinja").write_text(DEFAULT)
    theirs = AutoTokenizer.from_pretrained(tmp_path)
    for tools in (None, TOOLS):
        expected = theirs.apply_chat_template(MESSAGES, tools=tools, add_generation_prompt=True,
                                              tokenize=False)
        assert render_chat(tmp_path, MESSAGES, tools) == expected


def test_a_template_under_additional_chat_templates_is_scanned(tmp_path: Path) -> None:
    extra = tmp_path / "additional_chat_templates"
    extra.mkdir()
    (extra / "tool_use.jinja").write_text(TOOL_USE)
    assert [f.rule_id for f in scan_paths([tmp_path]).findings] == ["DG-TPL-UNREVIEWED"]
    (extra / "tool_use.jinja").write_text(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
        + TOOL_USE)
    found = scan_paths([tmp_path]).findings
    assert [(f.rule_id, f.file) for f in found] == [
        ("DG-TPL-COST", "additional_chat_templates/tool_use.jinja"),
        ("DG-TPL-UNREVIEWED", "additional_chat_templates/tool_use.jinja")]
