"""`scan_paths(finite_weights=True)` and `scan --finite-weights`: every float of the loaded
safetensors read (the gate's `scan.target_finite`); a weight file no engine loads is not read."""

from __future__ import annotations

import shutil
from pathlib import Path

from dflash_guard.scan import scan_paths
from tests.support.poisoned import POISONED, poisoned_target


def test_the_target_is_read_only_when_asked(builtin_pair, tmp_path: Path) -> None:
    target = poisoned_target(builtin_pair.target, tmp_path / "target")
    asked = scan_paths([target], finite_weights=True).findings
    assert [(f.rule_id, f.severity.name, f.file) for f in asked] == [
        ("DG-WEIGHTS-NONFINITE", "high", "model.safetensors")]
    assert asked[0].message.startswith(f"1 tensor(s) hold NaN or infinity (first: {POISONED})")
    assert not scan_paths([target]).findings


def test_the_real_target_is_finite(builtin_pair) -> None:
    assert not scan_paths([builtin_pair.target], finite_weights=True).findings


def test_a_weight_file_no_engine_loads_is_not_read(builtin_pair, tmp_path: Path) -> None:
    """vLLM globs weights at the folder's top level only: a NaN copy in a subfolder is never
    loaded, so it blocks nothing."""
    poisoned = poisoned_target(builtin_pair.target, tmp_path / "poisoned")
    target = shutil.copytree(builtin_pair.target, tmp_path / "target")
    (target / "old").mkdir()
    shutil.copy(poisoned / "model.safetensors", target / "old" / "model.safetensors")
    report = scan_paths([target], finite_weights=True)
    assert "old/model.safetensors" in report.not_loaded
    assert not [f for f in report.findings if f.rule_id == "DG-WEIGHTS-NONFINITE"]


def test_the_cli_flag(cli, builtin_pair, tmp_path: Path) -> None:
    target = poisoned_target(builtin_pair.target, tmp_path / "target")
    assert cli("scan", target).exit_code == 0
    result = cli("scan", target, "--finite-weights")
    assert result.exit_code == 1 and "DG-WEIGHTS-NONFINITE" in result.stdout, result.stdout
    assert cli("scan", builtin_pair.target, "--finite-weights").exit_code == 0
