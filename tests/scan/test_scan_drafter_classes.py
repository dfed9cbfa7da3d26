"""Drafter configs: each issue-14 class with a bad case and a benign twin (tests/support pair)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from tests.support.scan_builders import make_pair, write_json


def _rules(report, *, at_least: Severity = Severity.medium) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in report.findings:
        if f.detector == "drafter-config" and f.severity >= at_least:
            found.setdefault(f.rule_id, []).append(f.message)
    return found


def _scan(tmp_path: Path, **kwargs) -> dict[str, list[str]]:
    target, drafter = make_pair(tmp_path, **kwargs)
    return _rules(scan_paths([drafter], target=target))


def test_benign_pair_is_quiet(tmp_path: Path) -> None:
    assert _scan(tmp_path) == {}


@pytest.mark.parametrize(
    ("where", "mask", "source"),
    [
        ("special_tokens_map.json", 7, "special_tokens_map.json additional_special_tokens"),
        ("tokenizer.json", 8, "special token '<|tool|>'"),
        ("template", 9, "chat template control token '<|im_start|>'"),
    ],
)
def test_mask_aliasing_a_special_token_from_any_tokenizer_file(
    tmp_path: Path, where: str, mask: int, source: str
) -> None:
    target, drafter = make_pair(
        tmp_path,
        drafter={"dflash_config": {"mask_token_id": mask, "target_layer_ids": [1, 4]}},
        tokenizer={
            "added_tokens_decoder": {
                "4": {"content": "<|endoftext|>"}, "5": {"content": "<|pad|>"},
                "7": {"content": "<|sys|>"}, "9": {"content": "<|im_start|>"},
            },
            "chat_template": "{{ '<|im_start|>' + m.role }}" if where == "template" else "",
        },
    )
    write_json(target / "special_tokens_map.json", {"additional_special_tokens": ["<|sys|>"]})
    write_json(
        target / "tokenizer.json",
        {"added_tokens": [{"id": 8, "content": "<|tool|>", "special": True},
                          {"id": 999, "content": "<|MASK|>", "special": True}]},
    )
    hits = _rules(scan_paths([drafter], target=target)).get("DG-DRAFTER-MASK", [])
    assert any(source in message for message in hits), hits


def test_dedicated_mask_token_is_not_an_alias(tmp_path: Path) -> None:
    target, drafter = make_pair(tmp_path)
    write_json(target / "tokenizer.json",
               {"added_tokens": [{"id": 999, "content": "<|MASK|>", "special": True}]})
    write_json(target / "special_tokens_map.json", {"additional_special_tokens": ["<|MASK|>"]})
    assert _rules(scan_paths([drafter], target=target)) == {}


def test_mask_given_only_as_a_token_string_is_resolved(tmp_path: Path) -> None:
    target, drafter = make_pair(
        tmp_path,
        drafter={"dflash_config": {"mask_token": "<|MASK|>", "target_layer_ids": [1, 4]}},
    )
    write_json(target / "tokenizer.json", {"added_tokens": [{"id": 999, "content": "<|MASK|>"}]})
    assert _rules(scan_paths([drafter], target=target)) == {}
    aliased = json.loads((drafter / "config.json").read_text())
    aliased["dflash_config"]["mask_token"] = "<|pad|>"
    write_json(drafter / "config.json", aliased)
    assert "DG-DRAFTER-MASK" in _rules(scan_paths([drafter], target=target))


def test_duplicate_target_layer_ids(tmp_path: Path) -> None:
    hits = _scan(tmp_path, drafter={"dflash_config": {"mask_token_id": 999,
                                                      "target_layer_ids": [1, 4, 4]}})
    assert any("repeats [4]" in m for m in hits["DG-DRAFTER-LAYERS"])


def test_top_level_and_nested_values_that_disagree(tmp_path: Path) -> None:
    hits = _scan(tmp_path, drafter={"block_size": 16, "dflash_config": {
        "mask_token_id": 999, "target_layer_ids": [1, 4], "block_size": 8}})
    assert any("block_size" in m for m in hits["DG-DRAFTER-CONFLICT"])
    same = _scan(tmp_path / "same", drafter={"block_size": 8, "dflash_config": {
        "mask_token_id": 999, "target_layer_ids": [1, 4], "block_size": 8}})
    assert same == {}


def test_nested_block_size_is_the_one_checked(tmp_path: Path) -> None:
    hits = _scan(tmp_path, drafter={"block_size": None, "dflash_config": {
        "mask_token_id": 999, "target_layer_ids": [1, 4], "block_size": 200}})
    assert "DG-DRAFTER-BLOCK" in hits


def test_target_settings_under_text_config_are_checked(tmp_path: Path) -> None:
    target, drafter = make_pair(
        tmp_path, drafter={"dflash_config": {"mask_token_id": 999, "target_layer_ids": [1, 12]}}
    )
    flat = json.loads((target / "config.json").read_text())
    nested = {key: flat.pop(key) for key in ("vocab_size", "hidden_size", "num_hidden_layers",
                                             "num_attention_heads", "head_dim")}
    write_json(target / "config.json", {**flat, "text_config": nested})
    hits = _rules(scan_paths([drafter], target=target))
    assert any("out of range" in m for m in hits["DG-DRAFTER-LAYERS"])


def test_target_without_any_layer_count_is_reported(tmp_path: Path) -> None:
    hits = _scan(tmp_path, target={"num_hidden_layers": None})
    assert any("no num_hidden_layers" in m for m in hits["DG-DRAFTER-LAYERS"])


def test_last_target_layer_is_a_finding(tmp_path: Path) -> None:
    target, drafter = make_pair(
        tmp_path, drafter={"dflash_config": {"mask_token_id": 999, "target_layer_ids": [1, 7]}}
    )
    hits = _rules(scan_paths([drafter], target=target), at_least=Severity.medium)
    assert any("last layer 7" in m for m in hits["DG-DRAFTER-LAYERS"])
    _, benign = make_pair(tmp_path / "ok", drafter={"dflash_config": {
        "mask_token_id": 999, "target_layer_ids": [1, 6]}})
    clean = _rules(scan_paths([benign], target=target), at_least=Severity.low)
    assert not any("last layer" in m for m in clean.get("DG-DRAFTER-LAYERS", []))
