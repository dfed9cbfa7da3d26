"""The Modelfile parser (`launch/ollama_modelfile.py`) against ollama's own parser tests: every case
of parser/parser_test.go that exercises `ParseFile` (tests/vectors/ollama/parser_cases.json, each
case beside the Go literal it was transcribed from, which must appear in the vendored test file),
plus the grammar corners a lint depends on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_guard.launch.ollama_modelfile import (
    ERR_INVALID_COMMAND,
    ERR_MISSING_FROM,
    ERR_UNEXPECTED_EOF,
    Command,
    ModelfileError,
    decode,
    parse,
    render,
)

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "ollama"
CASES = json.loads((VECTORS / "parser_cases.json").read_text(encoding="utf-8"))["cases"]
GO_TESTS = (VECTORS / "parser_test.go").read_text(encoding="utf-8")


def _bytes(case: dict[str, str]) -> bytes:
    return bytes.fromhex(case.get("bom", "")) + case["input"].encode(case.get("encoding",
                                                                              "utf-8"))


def test_the_vectors_cover_ollamas_parser_tests() -> None:
    tests = {c["test"] for c in CASES}
    assert len(CASES) == 84
    assert {"TestParseFileFile", "TestParseFileFrom", "TestParseFileMessages",
            "TestParseFileQuoted", "TestParseFileParameters", "TestParseFileUTF16ParseFile",
            "TestParseMultiByte", "TestParseFileFormatParseFile", "TestParseFileDraft"} <= tests


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["test"])
def test_each_case_is_transcribed_from_the_go_file(case: dict[str, str]) -> None:
    literal = case["go"] if case["go_kind"] == "quoted" else f"`{case['go']}`"
    if case["test"] in ("TestParseFileUTF16ParseFile", "TestParseMultiByte",
                        "TestCreateRequest", "TestCreateRequestDraftRejectsSameFile"):
        literal = literal.strip("`").splitlines()[0]  # built in Go code from this text
    assert literal in GO_TESTS


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["test"])
def test_ollamas_parser_cases(case: dict) -> None:
    text = decode(_bytes(case))
    if case["error"] is not None:
        with pytest.raises(ModelfileError) as raised:
            parse(text)
        kind, _, line = case["error"].partition(":")
        expected = {"missing_from": ERR_MISSING_FROM, "unexpected_eof": ERR_UNEXPECTED_EOF,
                    "parser_error": None}[kind]
        if expected is not None:
            assert raised.value.kind == expected
        else:
            assert raised.value.line == int(line)
        return
    commands = parse(text)
    if case.get("round_trip"):  # Modelfile.String() parses back to the same commands
        assert parse(render(commands)) == commands
    else:
        assert [[c.name, c.args] for c in commands] == case["commands"]


def test_bad_command_names_ollamas_error_and_line() -> None:
    with pytest.raises(ModelfileError) as raised:
        parse("FROM foo\n\nBADCOMMAND x\n")
    assert str(raised.value) == f"(line 3): {ERR_INVALID_COMMAND}"


@pytest.mark.parametrize(("text", "expected"), [
    ("from /m.gguf\nTeMpLaTe x\n", [("model", "/m.gguf"), ("template", "x")]),  # any case
    ("FROM a # not a comment\n", [("model", "a # not a comment")]),  # '#' only starts a line
    ("  # indented comment\nFROM a\n", [("model", "a")]),
    ("FROM a\u00a0b\n", [("model", "ab")]),  # Go's IsPrint drops a no-break space
    ("FROM a\r\nDRAFT b\r\n", [("model", "a"), ("draft", "b")]),
    ('FROM a\nPARAMETER num_ctx "4096"\n', [("model", "a"), ("num_ctx", "4096")]),
    ("FROM a\nPARAMETER NUM_CTX 1\n", [("model", "a"), ("NUM_CTX", "1")]),  # name kept as given
])
def test_grammar_corners(text: str, expected: list[tuple[str, str]]) -> None:
    assert parse(text) == [Command(*pair) for pair in expected]


def test_quote_and_render_follow_command_string() -> None:
    commands = [Command("model", "/a b/m.gguf"), Command("draft", "/d.gguf"),
                Command("template", '{{ .Prompt }}\n"x"'), Command("num_ctx", "4096"),
                Command("message", "user: hi ")]
    text = render(commands)
    assert text.splitlines()[0] == "FROM /a b/m.gguf"
    assert 'TEMPLATE """{{ .Prompt }}\n"x""""' in text
    assert 'MESSAGE user "hi "' in text
    assert parse(text) == commands


def test_decode_follows_the_bom() -> None:
    assert decode(b"\xef\xbb\xbfFROM a") == "FROM a"
    assert decode(b"\xff\xfe" + "FROM a".encode("utf-16-le")) == "FROM a"
    assert decode(b"FROM \xff") == "FROM \ufffd"


COMMAND_WORDS = st.sampled_from(["FROM", "from", "DRAFT", "ADAPTER", "TEMPLATE", "SYSTEM",
                                 "PARAMETER", "MESSAGE", "LICENSE", "#", "BAD", ""])
PIECES = st.sampled_from([" ", "\t", "\n", "\r\n", '"', '"""', "user", "num_ctx", "x y",
                          "/m.gguf", "\u00a0", "\x00", "你好", "#"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(COMMAND_WORDS, st.lists(PIECES, max_size=6)), max_size=8))
def test_any_text_parses_or_is_a_modelfile_error(lines) -> None:
    """Whatever the text, the parser returns commands or raises `ModelfileError` (an input
    error, exit 2), never another exception; what it returns has a FROM."""
    text = "".join(word + "".join(rest) for word, rest in lines)
    try:
        commands = parse(text)
    except ModelfileError:
        return
    assert any(c.name == "model" for c in commands)
