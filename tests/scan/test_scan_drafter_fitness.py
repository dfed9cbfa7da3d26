"""A drafter that loads everywhere yet cannot work: weights that are not finite, a mask token
that ordinary text encodes to. Each bad case beside its benign twin, on the built-in pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from dflash_guard.scan import scan_paths
from dflash_guard.scan.weights import finite
from dflash_guard.scan.weights.safetensors import check_safetensors
from tests.support.trust import copy_folder


def _drafter_findings(target: Path, drafter: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in scan_paths([drafter], target=target).findings:
        if f.rule_id.startswith("DG-DRAFTER"):
            found.setdefault(f.rule_id, []).append(f"{f.severity.name}: {f.message}")
    return found


def _rewrite(drafter: Path, change) -> None:
    path = drafter / "model.safetensors"
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path)


def test_the_built_in_drafter_is_finite_and_quiet(builtin_pair) -> None:
    assert _drafter_findings(builtin_pair.target, builtin_pair.drafter) == {}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_drafter_tensor_that_is_not_finite_is_high(builtin_pair, tmp_path: Path,
                                                      value: float) -> None:
    drafter = copy_folder(builtin_pair.drafter, tmp_path / "drafter")

    def poison(tensors: dict[str, torch.Tensor]) -> None:
        weight = tensors["layers.1.mlp.down_proj.weight"]
        weight.view(-1)[weight.numel() // 2] = value  # one value in the middle of one tensor

    _rewrite(drafter, poison)
    found = _drafter_findings(builtin_pair.target, drafter)
    assert list(found) == ["DG-DRAFTER-WEIGHTS"]
    assert found["DG-DRAFTER-WEIGHTS"][0].startswith("high: 1 tensor(s) hold NaN or infinity "
                                                     "(first: layers.1.mlp.down_proj.weight)")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                   torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64])
def test_every_float_width_is_read(tmp_path: Path, dtype: torch.dtype, value: float) -> None:
    """Each dtype's NaN and infinities are found (float8_e4m3fn has no infinity: an infinity
    cast to it is NaN), and its largest finite values are not (the check sums `x * 0`: a
    finite extreme gives 0, never an overflow)."""
    path = tmp_path / "w.safetensors"
    real = torch.float32 if dtype.is_complex else dtype
    extreme = torch.finfo(real).max
    clean = torch.tensor([extreme, -extreme, torch.finfo(real).tiny, -0.0] * 250,
                         dtype=torch.float64).to(dtype)
    poisoned = torch.zeros(1000, dtype=torch.float64)
    poisoned[999] = float("nan") if dtype is torch.float8_e4m3fn else value
    save_file({"a": clean, "b": poisoned.to(dtype), "ids": torch.arange(5)}, path)
    _, header = check_safetensors(path, "w.safetensors")
    assert header is not None
    assert finite.nonfinite_tensors(path, header) == (["b"], [])


def test_a_tensor_longer_than_the_read_window_is_read_to_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(finite, "WINDOW", 64)  # bytes: the tensor spans many windows
    path = tmp_path / "w.safetensors"
    values = torch.ones(1001, dtype=torch.bfloat16)
    values[1000] = float("inf")  # in the last, partial window
    save_file({"long": values}, path)
    _, header = check_safetensors(path, "w.safetensors")
    assert header is not None
    assert finite.nonfinite_tensors(path, header) == (["long"], [])


def test_a_file_cut_short_after_its_header_was_read_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": torch.ones(4096)}, path)
    _, header = check_safetensors(path, "w.safetensors")
    assert header is not None
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size - 100)
    with pytest.raises(OSError, match="inside a tensor"):
        finite.nonfinite_tensors(path, header)


def _newline_id(target: Path) -> int:
    vocab = json.loads((target / "tokenizer.json").read_text())["model"]["vocab"]
    return vocab["Ċ"]  # byte-level BPE's newline


def test_a_mask_token_that_text_encodes_to_is_high(builtin_pair, tmp_path: Path) -> None:
    drafter = copy_folder(builtin_pair.drafter, tmp_path / "drafter")
    config = json.loads((drafter / "config.json").read_text())
    config["dflash_config"]["mask_token_id"] = _newline_id(builtin_pair.target)
    (drafter / "config.json").write_text(json.dumps(config))
    found = _drafter_findings(builtin_pair.target, drafter)
    assert list(found) == ["DG-DRAFTER-MASK"]
    assert "is the ordinary token 'Ċ' of the target's vocabulary" in found["DG-DRAFTER-MASK"][0]


def test_an_unused_id_is_a_dedicated_mask(builtin_pair, tmp_path: Path) -> None:
    """The published Qwen3 drafters' mask sits past the tokenizer's last id, below vocab_size:
    no text encodes to it. The built-in pair has such ids too (260..263)."""
    drafter = copy_folder(builtin_pair.drafter, tmp_path / "drafter")
    config = json.loads((drafter / "config.json").read_text())
    config["dflash_config"]["mask_token_id"] = 262
    (drafter / "config.json").write_text(json.dumps(config))
    assert _drafter_findings(builtin_pair.target, drafter) == {}
