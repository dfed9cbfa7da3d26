"""Model folders whose weights are not finite (`scan.target_finite`, DG-WEIGHTS-NONFINITE)."""

from __future__ import annotations

import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

POISONED = "model.embed_tokens.weight"


def poisoned_target(target: Path, folder: Path) -> Path:
    """A copy of the target with one NaN in the embedding row of its last, unused token (tied
    to the output head: the built-in target's copy answers every prompt with that token, then
    token 0, alike with and without the drafter)."""
    copy = Path(shutil.copytree(target, folder))
    path = copy / "model.safetensors"
    tensors = load_file(path)
    tensors[POISONED][-1, 0] = float("nan")
    save_file(tensors, path, metadata={"format": "pt"})
    return copy
