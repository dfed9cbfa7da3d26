"""Drafter configs held against the real loaders (z-lab's `dflash`, kernels_ref's config and
shape checks): layer id order, key/value heads, projection shapes, the mask id against the mask
token's text, GLM's `[gMASK]`, templates under `additional_chat_templates/`. Each crafted case
is flagged, its benign twin quiet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from dflash.model import DFlashDraftModel, extract_context_feature
from transformers import Qwen3Config

from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from kernels_ref.checkpoint import check_shapes, expected_shapes, tensor_shapes
from kernels_ref.config import ModelConfig
from kernels_ref.errors import RunnerError
from tests.support.llamacpp import source_tree
from tests.support.scan_builders import make_pair, write_json, write_safetensors

DRAFTER = {"num_key_value_heads": 2, "intermediate_size": 128}


def _hits(folder: Path, target: Path, rule: str) -> list[Any]:
    report = scan_paths([folder], target=target)
    return [f for f in report.findings if f.rule_id == rule]


def _zlab_weights(drafter: Path, config: dict[str, Any]) -> None:
    """The drafter's weights shaped as z-lab's DFlashDraftModel builds them from `config`."""
    shapes = expected_shapes(lambda: DFlashDraftModel(Qwen3Config(**config)))
    write_safetensors(drafter / "model.safetensors", shapes)


def _config(drafter: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((drafter / "config.json").read_text())
    return loaded


def test_layer_ids_out_of_order_are_high(tmp_path: Path) -> None:
    target, drafter = make_pair(tmp_path / "bad", drafter={
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [6, 1, 4]}})
    hits = _hits(drafter, target, "DG-DRAFTER-LAYERS")
    assert hits and hits[0].severity is Severity.high and "increasing" in hits[0].message
    target, drafter = make_pair(tmp_path / "twin")
    assert _hits(drafter, target, "DG-DRAFTER-LAYERS") == []


def test_the_reference_reads_layer_ids_in_the_listed_order() -> None:
    """z-lab's feature capture concatenates in the listed order; vLLM's captures them sorted
    (`_set_aux_hidden_state_layers`: `tuple(sorted(set(layers)))`): the same list read both
    ways gives different fc inputs unless it is already increasing."""
    states = tuple(torch.full((1, 1, 2), float(i)) for i in range(9))
    listed = extract_context_feature(states, [6, 1, 4])
    ordered = extract_context_feature(states, sorted([6, 1, 4]))
    assert not torch.equal(listed, ordered)
    assert torch.equal(extract_context_feature(states, [1, 4, 6]), ordered)


def test_kv_heads_that_do_not_divide_the_heads_are_refused_like_kernels_ref(
        tmp_path: Path) -> None:
    target, drafter = make_pair(tmp_path / "bad", drafter={**DRAFTER, "num_key_value_heads": 3})
    hits = _hits(drafter, target, "DG-DRAFTER-SHAPE")
    assert hits and hits[0].severity is Severity.high and "multiple" in hits[0].message
    with pytest.raises(RunnerError, match="num_key_value_heads"):
        ModelConfig.from_dict(_config(drafter), drafter)
    target, drafter = make_pair(tmp_path / "twin", drafter=DRAFTER)
    assert _hits(drafter, target, "DG-DRAFTER-SHAPE") == []
    ModelConfig.from_dict(_config(drafter), drafter)  # kernels_ref accepts the twin


@pytest.mark.parametrize("field,value", [("num_key_value_heads", 1), ("head_dim", 8),
                                         ("num_attention_heads", 2)])
def test_projection_shapes_disagreeing_with_the_head_counts_are_refused_like_the_loader(
        tmp_path: Path, field: str, value: int) -> None:
    """Weights built by z-lab's drafter class from the published shape of the config; the
    config then changed: kernels_ref's shape check refuses the pair, and so must the scan."""
    target, drafter = make_pair(tmp_path, drafter=DRAFTER)
    config = _config(drafter)
    _zlab_weights(drafter, config)
    assert _hits(drafter, target, "DG-DRAFTER-SHAPE") == []  # the benign twin
    check_shapes(expected_shapes(lambda: DFlashDraftModel(Qwen3Config(**config))),
                 tensor_shapes(drafter), drafter)
    write_json(drafter / "config.json", {**config, field: value})
    changed = {**config, field: value}
    with pytest.raises(RunnerError, match="shape"):
        check_shapes(expected_shapes(lambda: DFlashDraftModel(Qwen3Config(**changed))),
                     tensor_shapes(drafter), drafter)
    hits = _hits(drafter, target, "DG-DRAFTER-SHAPE")
    assert hits and hits[0].severity is Severity.high and "_proj.weight" in hits[0].message


def test_a_mask_id_that_disagrees_with_the_mask_token_text_is_high(tmp_path: Path) -> None:
    tokenizer = {"added_tokens_decoder": {"4": {"content": "<|endoftext|>"},
                                          "5": {"content": "<|pad|>"},
                                          "7": {"content": "<|mask|>"}}}
    target, drafter = make_pair(tmp_path / "bad", tokenizer=tokenizer, drafter={
        "dflash_config": {"mask_token_id": 999, "mask_token": "<|mask|>",
                          "target_layer_ids": [1, 4, 6]}})
    hits = _hits(drafter, target, "DG-DRAFTER-MASK")
    assert hits and hits[0].severity is Severity.high and "disagrees" in hits[0].message
    target, drafter = make_pair(tmp_path / "twin", tokenizer=tokenizer, drafter={
        "dflash_config": {"mask_token_id": 7, "mask_token": "<|mask|>",
                          "target_layer_ids": [1, 4, 6]}})
    assert _hits(drafter, target, "DG-DRAFTER-MASK") == []


_GLM_TOKENS = {"4": {"content": "<|endoftext|>", "special": True},
               "5": {"content": "<|pad|>", "special": True},
               "6": {"content": "[gMASK]", "special": True},
               "7": {"content": "[MASK]", "special": True},
               "8": {"content": "<sop>", "special": True}}


@pytest.mark.parametrize("mask,flagged", [(6, True), (7, False)])
def test_glm_gmask_is_a_control_token_not_a_mask(tmp_path: Path, mask: int,
                                                 flagged: bool) -> None:
    """GLM's `[gMASK]` (its template writes `[gMASK]<sop>`) merely contains "mask"; `[MASK]` is
    GLM's mask token."""
    target, drafter = make_pair(tmp_path, tokenizer={"added_tokens_decoder": _GLM_TOKENS},
                                drafter={"dflash_config": {"mask_token_id": mask,
                                                           "target_layer_ids": [1, 4, 6]}})
    hits = _hits(drafter, target, "DG-DRAFTER-MASK")
    assert bool(hits) is flagged
    if flagged:
        assert hits[0].severity is Severity.high and "[gMASK]" in hits[0].message


def test_glm_real_template_makes_gmask_reserved_even_when_not_marked_special(
        tmp_path: Path) -> None:
    template = source_tree() / "models" / "templates" / "GLM-4.6.jinja"
    tokens = {k: {**v, "special": False} for k, v in _GLM_TOKENS.items()}
    target, drafter = make_pair(tmp_path, tokenizer={"added_tokens_decoder": tokens},
                                drafter={"dflash_config": {"mask_token_id": 6,
                                                           "target_layer_ids": [1, 4, 6]}})
    assert _hits(drafter, target, "DG-DRAFTER-MASK") == []  # nothing says [gMASK] is used
    (target / "chat_template.jinja").write_bytes(template.read_bytes())
    hits = _hits(drafter, target, "DG-DRAFTER-MASK")
    assert hits and "chat template control token '[gMASK]'" in hits[0].message


def test_additional_chat_templates_are_read_for_control_tokens(tmp_path: Path) -> None:
    tokens = {"4": {"content": "<|endoftext|>"}, "5": {"content": "<|pad|>"},
              "9": {"content": "<|tool_call|>"}}
    target, drafter = make_pair(tmp_path, tokenizer={"added_tokens_decoder": tokens},
                                drafter={"dflash_config": {"mask_token_id": 9,
                                                           "target_layer_ids": [1, 4, 6]}})
    assert _hits(drafter, target, "DG-DRAFTER-MASK") == []
    extra = target / "additional_chat_templates"
    extra.mkdir()
    (extra / "tool_use.jinja").write_text(
        "{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}<|tool_call|>{% endif %}")
    hits = _hits(drafter, target, "DG-DRAFTER-MASK")
    assert hits and "'<|tool_call|>'" in hits[0].message


def test_real_drafters_are_quiet(builtin_pair, dflash2_pair, tmp_path: Path) -> None:
    """The shipped pairs (weights z-lab's loader reads, `load_upstream`), and the published
    z-lab/Qwen3.8-27B-DFlash2 config: no shape, layer or mask finding."""
    rules = {"DG-DRAFTER-SHAPE", "DG-DRAFTER-LAYERS", "DG-DRAFTER-MASK"}
    for pair in (builtin_pair, dflash2_pair):
        found = scan_paths([pair.drafter], target=pair.target).findings
        assert [f for f in found if f.rule_id in rules] == []
    published = Path(__file__).parent / "corpus" / "drafter_configs" / "qwen3.8-27b-dflash2"
    found = scan_paths([published]).findings
    assert [f for f in found if f.rule_id in rules] == []
