"""Which role a model folder can play, read from its `config.json` before anything is locked or
gated: a DFlash drafter given as the target, or a target given as the drafter, is the same
mistake (`--target` and `--drafter` swapped), and it is a usage error, not a finding."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input_json

DRAFTER_RE = re.compile(r"^DFlash\w*DraftModel$")  # DFlashDraftModel, DFlash2DraftModel
TARGET_RE = re.compile(r"\w+ForCausalLM$")


def _architectures(folder: Path) -> list[str]:
    config = folder / "config.json"
    if not config.is_file():
        return []  # nothing to decide from: the scan and the diff judge such a folder
    raw = read_input_json(config, "model config")
    names = raw.get("architectures") if isinstance(raw, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def refuse_swapped_roles(folders: Mapping[str, Path], flag: str = "--{role}") -> None:
    """Raise `InputError` when the folder given as the target is a DFlash drafter, or the one
    given as the drafter is a causal LM target; `flag` names the option (`--root {role}=`)."""
    for role, folder in folders.items():
        names = _architectures(Path(folder))
        drafter = any(DRAFTER_RE.match(n) for n in names)
        wrong = (role == "target" and drafter) or (
            role == "drafter" and not drafter and any(TARGET_RE.search(n) for n in names))
        if wrong:
            what = "a DFlash drafter" if drafter else "a target model"
            raise InputError(f"{flag.format(role=role)} {folder} is {what} ({names[0]} in its "
                             "config.json): did you swap the target and the drafter?")
