"""A drafter's model card (`README.md` front matter, read with huggingface_hub's `ModelCard`)
checked against the policy's `model_card` rules: `base_model` names the locked target, the
`license` is an allowed one, `datasets` (the training-data claim) is present.

The front matter is untrusted YAML: it is read through the bounded reader and first parsed by the
tool's strict document reader (no anchors or aliases, bounded depth), so `ModelCard` only ever
sees a small, alias-free document.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input_text
from dflash_guard.schema import read_document

CARD_NAME = "README.md"
CARD_MAX_BYTES = 1024 * 1024
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(\n|\Z)", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ModelCardRules:
    """The `model_card` section of a policy (every rule off unless set)."""

    base_model_is_target: bool = False
    licenses: tuple[str, ...] = ()  # allowed SPDX-style ids; empty: any license
    datasets_required: bool = False


@dataclasses.dataclass(frozen=True)
class CardFacts:
    """What a model card claims."""

    base_model: tuple[str, ...]
    license: str | None
    datasets: tuple[str, ...]


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(str(v) for v in value if isinstance(v, str))
    return ()


def read_card(folder: Path) -> CardFacts | None:
    """The claims of `folder/README.md`'s front matter; None when there is no card; an
    `InputError` for a card that cannot be read or parsed."""
    from huggingface_hub import ModelCard, ModelCardData

    path = folder / CARD_NAME
    if not path.exists():
        return None
    text = read_input_text(path, "model card", CARD_MAX_BYTES)
    match = _FRONT_MATTER.match(text)
    if match is not None:
        read_document(match.group(1), str(path))  # refuses aliases, deep nesting, python tags
    try:
        data = ModelCard(text).data
    except Exception as error:  # noqa: BLE001 - ModelCard raises YAML and validation errors
        raise InputError(f"{path}: not a valid model card ({type(error).__name__})") from None
    if not isinstance(data, ModelCardData):  # what ModelCard builds; typed as its base CardData
        raise InputError(f"{path}: not a valid model card ({type(data).__name__})")
    license_ = data.license if isinstance(data.license, str) else None
    return CardFacts(_strings(data.base_model), license_, _strings(data.datasets))


def card_problems(folder: Path, rules: ModelCardRules, target_repo: str | None) -> list[str]:
    """Why the card in `folder` breaks the rules (empty: it does not). A missing card breaks
    every rule that is set; a target without a Hub repo cannot be named as `base_model`."""
    if rules == ModelCardRules():
        return []
    card = read_card(folder)
    if card is None:
        return [f"no model card ({CARD_NAME}) to check the policy's model_card rules against"]
    problems = []
    if rules.base_model_is_target:
        if target_repo is None:
            problems.append("model_card.base_model: the target is a local folder, so the card's "
                            "base_model cannot be checked against it")
        elif target_repo.casefold() not in {b.casefold() for b in card.base_model}:
            named = ", ".join(card.base_model) or "nothing"
            problems.append(f"model card base_model names {named}, not the locked target "
                            f"{target_repo}")
    if rules.licenses and card.license not in rules.licenses:
        problems.append(f"model card license {card.license or '(none)'!r} is not one of "
                        f"{', '.join(rules.licenses)}")
    if rules.datasets_required and not card.datasets:
        problems.append("model card names no training datasets (datasets:)")
    return problems
