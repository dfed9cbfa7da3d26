"""tokenizer.json regexes (issue 33): run by the real `tokenizers` in a bounded child; a
catastrophic pattern is high, the published pre-tokenizer patterns stay quiet."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dflash_guard import rules
from dflash_guard.findings import Finding
from dflash_guard.scan import scan_paths
from dflash_guard.scan.code.tokenizer_regex import check_tokenizer_json, patterns
from dflash_guard.severity import Severity
from tests.support.llamacpp import _script


def _tokenizer_json(pre: list[str], normalizer: str | None = None) -> dict[str, object]:
    """A tokenizer.json in the layout `tokenizers` saves: a BPE over a few tokens, the
    given `Split` regexes as its pre-tokenizer and optionally a `Replace` normalizer."""
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None if normalizer is None else {
            "type": "Replace", "pattern": {"Regex": normalizer}, "content": " "},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}
            for p in pre]},
        "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
    }


def regex_findings(path: Path) -> list[Finding]:
    """The regex check's findings alone: these three-token vocabularies drop most characters of
    ordinary text, which the round trip (tests/vocab/test_tokenizer_rewrite.py) reports."""
    return [f for f in check_tokenizer_json(path, path.name)
            if f.rule_id == rules.TOKENIZER_REGEX.id]


def _published_patterns() -> list[str]:
    """Every pre-tokenizer regex llama.cpp's vocab loader (src/llama-vocab.cpp of the pinned
    tree) carries for the model families it supports: the patterns of their tokenizer.json."""
    tree = Path(_script("tree", timeout=600))
    source = (tree / "src" / "llama-vocab.cpp").read_text(encoding="utf-8")
    blocks = re.findall(r"regex_exprs = \{(.*?)\};", source, flags=re.DOTALL)
    found: list[str] = []
    for block in blocks:
        for line in block.splitlines():
            line = line.strip()
            if line.startswith("//"):
                line = line.lstrip("/").strip()
            literal = re.fullmatch(r'"((?:[^"\\]|\\.)*)",?', line)
            if literal:
                found.append(re.sub(r"\\(.)", lambda m: {"r": "\r", "n": "\n", "t": "\t"}.get(
                    m.group(1), m.group(1)), literal.group(1)))
    # llama.cpp's own `\p{AFMoE_digits}` is a property its C++ splitter defines, not Oniguruma's
    return sorted(set(found) - {"\\p{AFMoE_digits}"})


def test_every_published_pretokenizer_regex_is_quiet(tmp_path: Path) -> None:
    published = _published_patterns()
    assert len(published) >= 20
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(_tokenizer_json(published)), encoding="utf-8")
    assert patterns(json.loads(path.read_text())) != []
    assert regex_findings(path) == []


def test_catastrophic_and_invalid_regexes_are_high(tmp_path: Path) -> None:
    cases = {
        "nested": _tokenizer_json(["\\s+(?!\\S)", "(a+)+b"]),
        "normalizer": _tokenizer_json(["\\s+"], normalizer="([a-z ]+)*\\d"),
        "alternation": _tokenizer_json(["(a|aa)+$"]),
        "uncompilable": _tokenizer_json(["(unclosed"]),
    }
    for label, document in cases.items():
        folder = tmp_path / label
        folder.mkdir()
        name = "tokenizer.json" if label != "alternation" else "tok-v2.json"  # any name
        (folder / name).write_text(json.dumps(document))
        loud = [f for f in scan_paths([folder]).findings if f.rule_id == "DG-TOKENIZER-REGEX"]
        assert loud and loud[0].severity >= Severity.medium, label


def test_a_tokenizer_without_regexes_has_none_to_judge(tmp_path: Path) -> None:
    document = _tokenizer_json([])
    document["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                                 "trim_offsets": True, "use_regex": True}
    (tmp_path / "tokenizer.json").write_text(json.dumps(document))
    assert regex_findings(tmp_path / "tokenizer.json") == []


def test_a_child_that_dies_or_runs_out_of_time_is_high(tmp_path: Path, monkeypatch) -> None:
    """Fail closed: the memory cap (here too small to even import the library) and the
    deadline each end in a finding, never in a pass."""
    from dflash_guard.scan.code import tokenizer_regex

    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(_tokenizer_json(["\\s+"])))
    assert regex_findings(path) == []
    monkeypatch.setattr(tokenizer_regex, "MAX_MEMORY", 16 << 20)
    died = check_tokenizer_json(path, "tokenizer.json")
    assert [f.severity for f in died] == [Severity.high] and "died" in died[0].message
    monkeypatch.setattr(tokenizer_regex, "MAX_MEMORY", 4 << 30)
    monkeypatch.setattr(tokenizer_regex, "MAX_SECONDS", 0.01)
    late = check_tokenizer_json(path, "tokenizer.json")
    assert [f.severity for f in late] == [Severity.high] and "still running" in late[0].message
