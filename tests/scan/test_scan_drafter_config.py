"""Drafter config vs target: aliased mask tokens, layer ids, block size, budget, architecture."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from tests.support.scan_builders import make_pair, write_safetensors


def _config_findings(report):
    return [f for f in report.findings if f.detector == "drafter-config"]


_PARAMS = 64 + 64 * 3 * 64  # make_pair's drafter: one layer norm and the fc projection


def test_consistent_pair_is_clean(tmp_path: Path) -> None:
    target, drafter = make_pair(tmp_path)
    report = scan_paths([drafter], target=target)
    assert report.findings == []
    assert report.param_count == _PARAMS


@pytest.mark.parametrize(
    "mask,source",
    [
        (0, "pad_token_id"),  # config.json pad
        (1, "bos_token_id"),
        (3, "generation_config.json eos_token_id"),  # second of a list of eos ids
        (5, "pad_token '<|pad|>'"),  # tokenizer_config special token by added_tokens_decoder
        (4, "eos_token '<|endoftext|>'"),
    ],
)
def test_mask_token_aliasing_a_special_id_is_high(tmp_path: Path, mask: int, source: str) -> None:
    target, drafter = make_pair(
        tmp_path, drafter={"dflash_config": {"mask_token_id": mask, "target_layer_ids": [1]}}
    )
    hits = [
        f
        for f in _config_findings(scan_paths([drafter], target=target))
        if f.rule_id == "DG-DRAFTER-MASK"
    ]
    assert hits and hits[0].severity is Severity.high and source in hits[0].message


def test_mask_outside_vocab_and_top_level_mask(tmp_path: Path) -> None:
    target, drafter = make_pair(
        tmp_path, drafter={"dflash_config": {"target_layer_ids": [1]}, "mask_token_id": 5000}
    )
    hits = [
        f
        for f in _config_findings(scan_paths([drafter], target=target))
        if f.rule_id == "DG-DRAFTER-MASK"
    ]
    assert hits and "outside the vocabulary" in hits[0].message


def test_layers_out_of_range_and_count_mismatch(tmp_path: Path) -> None:
    target, drafter = make_pair(
        tmp_path,
        drafter={
            "num_target_layers": 36,
            "dflash_config": {"mask_token_id": 999, "target_layer_ids": [1, 8]},
        },
    )
    messages = [
        f.message
        for f in _config_findings(scan_paths([drafter], target=target))
        if f.rule_id == "DG-DRAFTER-LAYERS"
    ]
    assert len(messages) == 2


def test_shape_mismatch(tmp_path: Path) -> None:
    target, drafter = make_pair(tmp_path, target={"hidden_size": 128})
    rules = {f.rule_id for f in scan_paths([drafter], target=target).findings}
    assert "DG-DRAFTER-SHAPE" in rules


@pytest.mark.parametrize("block", [1, 65, "16"])
def test_block_size_out_of_range(tmp_path: Path, block) -> None:
    target, drafter = make_pair(tmp_path, drafter={"block_size": block})
    hits = [
        f for f in scan_paths([drafter], target=target).findings if f.rule_id == "DG-DRAFTER-BLOCK"
    ]
    assert hits and hits[0].severity is Severity.medium


def test_parameter_budget(tmp_path: Path) -> None:
    target, drafter = make_pair(tmp_path)
    over = scan_paths([drafter], target=target, param_budget=_PARAMS - 1)
    assert [f.rule_id for f in over.findings] == ["DG-DRAFTER-PARAMS"]
    assert scan_paths([drafter], target=target, param_budget=_PARAMS).findings == []


def test_unknown_architecture_without_target(tmp_path: Path) -> None:
    _, drafter = make_pair(tmp_path, drafter={"architectures": ["DFlashEvilModel"]})
    hits = [f for f in scan_paths([drafter]).findings if f.rule_id == "DG-DRAFTER-ARCH"]
    assert hits and hits[0].severity is Severity.medium


def test_plain_model_folder_without_target_is_not_a_drafter(tmp_path: Path) -> None:
    target, _ = make_pair(tmp_path)
    # its tokenizer files have no upstream (tests/scan/test_upstream.py): nothing else is found
    assert [f.detector for f in scan_paths([target]).findings] == ["upstream"]


def test_target_given_but_no_drafter_config(tmp_path: Path) -> None:
    target, _ = make_pair(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    rules = [f.rule_id for f in scan_paths([empty], target=target).findings]
    assert rules == ["DG-CONFIG-INVALID"]


def test_non_string_names_are_findings_not_crashes(tmp_path: Path) -> None:
    target, drafter = make_pair(
        tmp_path,
        drafter={"architectures": [{"a": 1}], "dflash_config": {"mask_token_id": 9}},
        tokenizer={"added_tokens_decoder": {"9": {"content": ["x"]}}, "eos_token": ["x"]},
    )
    rules = {f.rule_id for f in _config_findings(scan_paths([drafter], target=target))}
    assert "DG-DRAFTER-ARCH" in rules


DFLASH2 = {
    "architectures": ["DFlash2DraftModel"],
    "dflash_config": {
        "block_size": 16, "conv_group_size": 16, "conv_kernel_size": 2, "mask_token_id": 7,
        "selector_rank": 16, "selector_top_k": 4, "target_layer_ids": [1, 5],
    },
}


def _dflash2_findings(tmp_path: Path, **changes) -> list:
    nested = {**DFLASH2["dflash_config"], **changes.pop("dflash_config", {})}
    target, drafter = make_pair(
        tmp_path, drafter={**DFLASH2, **changes, "dflash_config": nested}
    )
    return _config_findings(scan_paths([drafter], target=target))


def test_consistent_dflash2_drafter_is_clean(tmp_path: Path) -> None:
    assert _dflash2_findings(tmp_path) == []


@pytest.mark.parametrize(
    ("changes", "severity", "message"),
    [
        ({"dflash_config": {"conv_group_size": 24}}, Severity.high, "not a multiple of"),
        ({"dflash_config": {"selector_top_k": 0}}, Severity.high, "selector_top_k is 0"),
        ({"dflash_config": {"selector_rank": None}}, Severity.high, "selector_rank is None"),
        ({"dflash_config": {"selector_top_k": 8}}, Severity.high, "llama.cpp cannot pack"),
        ({"dflash_config": {"conv_kernel_size": 17}}, Severity.medium, "only read zeros"),
        # The nested value wins: a good top-level value does not hide a bad nested one.
        ({"conv_group_size": 16, "dflash_config": {"conv_group_size": 24}}, Severity.high,
         "conv_group_size 24"),
    ],
)
def test_dflash2_constraints(tmp_path: Path, changes: dict, severity, message: str) -> None:
    findings = _dflash2_findings(tmp_path, **changes)
    hits = [f for f in findings if f.rule_id == "DG-DRAFTER-CONV-SELECTOR"]
    assert hits and hits[0].severity is severity and message in hits[0].message


def test_dflash2_nested_block_size_wins_and_disagreement_is_a_finding(tmp_path: Path) -> None:
    findings = _dflash2_findings(tmp_path, block_size=128)  # nested 16 is in range
    assert {f.rule_id for f in findings} == {"DG-DRAFTER-CONFLICT"}
    assert "block_size is 128 at the top level but 16 in dflash_config" in findings[0].message


def test_dflash2_fields_are_not_asked_of_a_v1_drafter(tmp_path: Path) -> None:
    assert _dflash2_findings(tmp_path, architectures=["DFlashDraftModel"]) == []


def test_declared_layers_against_the_weights(tmp_path: Path) -> None:
    target, drafter = make_pair(tmp_path)
    write_safetensors(drafter / "model.safetensors", {
        "layers.0.input_layernorm.weight": (64,), "layers.1.input_layernorm.weight": (64,),
        "fc.weight": (64, 3 * 64)})
    loud = [f for f in scan_paths([drafter], target=target).findings
            if f.severity >= Severity.high]
    assert [f.rule_id for f in loud] == ["DG-DRAFTER-LAYERS"]
    assert "num_hidden_layers is 1" in loud[0].message


def test_fc_width_against_target_layer_ids(tmp_path: Path) -> None:
    target, drafter = make_pair(tmp_path)
    write_safetensors(drafter / "model.safetensors", {
        "layers.0.input_layernorm.weight": (64,), "fc.weight": (64, 2 * 64)})
    loud = [f for f in scan_paths([drafter], target=target).findings
            if f.severity >= Severity.high]
    assert [f.rule_id for f in loud] == ["DG-DRAFTER-SHAPE"]


def test_head_dim_missing_on_one_side_is_a_finding(tmp_path: Path) -> None:
    # derivable on the target (64 // 4 = 16): compared, equal, quiet
    target, drafter = make_pair(tmp_path / "a", target={"head_dim": None})
    assert scan_paths([drafter], target=target).findings == []
    # not derivable on the target: a finding, not a skip
    target, drafter = make_pair(tmp_path / "b", target={"head_dim": None,
                                                        "num_attention_heads": None})
    shape = [f for f in scan_paths([drafter], target=target).findings
             if f.rule_id == "DG-DRAFTER-SHAPE"]
    assert shape and "target's head_dim cannot be read" in shape[0].message
