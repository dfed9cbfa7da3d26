"""Can this DFlash drafter run on this target? One check over the two `config.json` dicts.

Pure Python (no torch), shared by the guard's scanner (findings) and `kernels_ref.drafter`
(refusing to load). Where a field lives follows z-lab's published drafters: `mask_token_id` and
`target_layer_ids` in `dflash_config`, the rest at the top level; either place is read, the
usual one first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

IN_DFLASH_CONFIG = frozenset({"mask_token_id", "target_layer_ids"})


@dataclass(frozen=True)
class Problem:
    """One incompatibility: a stable `code` (the config field) and a readable message."""

    code: str  # mask_token_id | target_layer_ids | num_target_layers | hidden_size | vocab_size
    message: str


def dflash_field(drafter: Mapping[str, Any], name: str) -> Any:
    """A DFlash field of a drafter config, from `dflash_config` or the top level."""
    nested = drafter.get("dflash_config")
    nested = nested if isinstance(nested, Mapping) else {}
    first, second = (nested, drafter) if name in IN_DFLASH_CONFIG else (drafter, nested)
    value = first.get(name)
    return second.get(name) if value is None else value


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def compatibility_problems(
    drafter: Mapping[str, Any], target: Mapping[str, Any]
) -> list[Problem]:
    """What stops `drafter` from drafting for `target` (both `config.json` dicts).

    A field missing on either side is not checked (an empty `target` checks the mask token
    against the drafter's own vocabulary only).
    """
    problems = []
    mask = dflash_field(drafter, "mask_token_id")
    vocab = target.get("vocab_size", drafter.get("vocab_size"))
    if not _is_int(mask):
        message = f"mask_token_id {mask!r} is missing or not an integer"
        problems.append(Problem("mask_token_id", message))
    elif _is_int(vocab) and not 0 <= mask < vocab:
        message = f"mask_token_id {mask} is outside the vocabulary (0..{vocab - 1})"
        problems.append(Problem("mask_token_id", message))
    layers = target.get("num_hidden_layers")
    if _is_int(layers):
        layer_ids = dflash_field(drafter, "target_layer_ids")
        listed = isinstance(layer_ids, list)
        bad = [i for i in layer_ids if not (_is_int(i) and 0 <= i < layers)] if listed else []
        if bad or not listed:
            message = f"target_layer_ids {bad or layer_ids!r} out of range 0..{layers - 1}"
            problems.append(Problem("target_layer_ids", message))
        count = dflash_field(drafter, "num_target_layers")
        if count is not None and count != layers:
            message = f"num_target_layers {count!r} != the target's num_hidden_layers {layers}"
            problems.append(Problem("num_target_layers", message))
    for key in ("hidden_size", "vocab_size"):
        ours, theirs = drafter.get(key), target.get(key)
        if ours is not None and theirs is not None and ours != theirs:
            problems.append(Problem(key, f"{key} {ours!r} != the target's {theirs!r}"))
    return problems
