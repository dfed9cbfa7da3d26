"""The one drafter-vs-target check (`kernels_ref.compat`) that scan and the loader share."""

from __future__ import annotations

import pytest

from kernels_ref.compat import compatibility_problems, dflash_field

TARGET = {"vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 4}
DRAFTER = {
    "vocab_size": 300,
    "hidden_size": 64,
    "num_target_layers": 4,
    "dflash_config": {"mask_token_id": 299, "target_layer_ids": [0, 3]},
}


def test_a_matching_pair_has_no_problems() -> None:
    assert compatibility_problems(DRAFTER, TARGET) == []


@pytest.mark.parametrize(
    ("changes", "code", "message"),
    [
        ({"hidden_size": 48}, "hidden_size", "hidden_size 48 != the target's 64"),
        ({"vocab_size": 200}, "vocab_size", "vocab_size 200 != the target's 300"),
        ({"num_target_layers": 5}, "num_target_layers", "num_target_layers 5 != the target's"),
        ({"mask_token_id": 300}, "mask_token_id", "outside the vocabulary (0..299)"),
        ({"mask_token_id": "x"}, "mask_token_id", "missing or not an integer"),
        ({"target_layer_ids": [0, 4]}, "target_layer_ids", "[4] out of range 0..3"),
        ({"target_layer_ids": "0,3"}, "target_layer_ids", "'0,3' out of range"),
    ],
)
def test_each_mismatch_is_named_with_a_stable_code(changes, code, message) -> None:
    nested = {k: v for k, v in changes.items() if k in ("mask_token_id", "target_layer_ids")}
    top = {k: v for k, v in changes.items() if k not in nested}
    drafter = {**DRAFTER, **top, "dflash_config": {**DRAFTER["dflash_config"], **nested}}
    (problem,) = compatibility_problems(drafter, TARGET)
    assert problem.code == code and message in problem.message


def test_without_a_target_only_the_mask_is_checked_against_the_drafters_vocab() -> None:
    bad = {**DRAFTER, "hidden_size": 1, "dflash_config": {"mask_token_id": 300}}
    assert [p.code for p in compatibility_problems(bad, {})] == ["mask_token_id"]


def test_fields_are_read_where_published_drafters_put_them() -> None:
    both = {"mask_token_id": 1, "num_target_layers": 2,
            "dflash_config": {"mask_token_id": 3, "num_target_layers": 4}}
    assert dflash_field(both, "mask_token_id") == 3  # dflash_config first
    assert dflash_field(both, "num_target_layers") == 2  # top level first
    assert dflash_field({"target_layer_ids": [1]}, "target_layer_ids") == [1]
