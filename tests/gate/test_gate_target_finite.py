"""`scan.target_finite`: the gate reads every float of the target's loaded safetensors. A target
with one NaN passes every other check, the lossless diff test included (its NaN decodes alike
with and without the drafter), so only this read can refuse it: refused with the field on
(strict sets it), approved with it off (default); the real built-in target stays quiet."""

from __future__ import annotations

from pathlib import Path

from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.pins.resolve import build_lock
from tests.support.poisoned import poisoned_target
from tests.support.trust import REPO, make_key_pair, write_lock, write_policy

ON = ("  target_finite: false\n", "  target_finite: true\n")


def _gate(tmp_path: Path, target: Path, drafter: Path, policy: Path):
    lock = write_lock(build_lock({"target": str(target), "drafter": str(drafter)}).lock,
                      tmp_path / "dflash.lock")
    roots = {"target": target, "drafter": drafter}
    return run_gate(GateOptions(lock, policy, roots, out=tmp_path / "approval.json"))


def _strict_policy(tmp_path: Path) -> Path:
    """strict's scan settings for a local folder treated as official, a model signer named and
    no lockfile signature (as tests/scan/test_scan_gate.py): the refusal must be the scan's."""
    _, public = make_key_pair(tmp_path)
    base = (REPO / "policies" / "strict.yaml").read_text()
    return write_policy(
        tmp_path / "policy", ("local_tier: unknown", "local_tier: official"),
        ("lockfile_required: true", "lockfile_required: false"),
        ("  models: {identities: [], public_keys: []}",
         f"  models: {{identities: [], public_keys: [{public}]}}"),
        base=base.replace("max_new_tokens: 64", "max_new_tokens: 32"))


def test_a_nan_target_is_refused_with_the_field_on_and_approved_without(
        builtin_pair, tmp_path: Path) -> None:
    target = poisoned_target(builtin_pair.target, tmp_path / "target")
    off = _gate(tmp_path / "off", target, builtin_pair.drafter,
                write_policy(tmp_path / "off" / "policy"))
    assert off.approved, off.reason  # the diff test cannot tell: this read is the only check
    on = _gate(tmp_path / "on", target, builtin_pair.drafter,
               write_policy(tmp_path / "on" / "policy", ON))
    assert not on.approved
    assert on.checks[-1].name == "scan" and "DG-WEIGHTS-NONFINITE" in on.reason, on.reason


def test_strict_refuses_a_nan_target(builtin_pair, tmp_path: Path) -> None:
    target = poisoned_target(builtin_pair.target, tmp_path / "target")
    result = _gate(tmp_path, target, builtin_pair.drafter, _strict_policy(tmp_path))
    assert not result.approved
    assert result.checks[-1].name == "scan", result.reason
    assert all(c.outcome.ok for c in result.checks[:-1]), result.reason
    assert "DG-WEIGHTS-NONFINITE" in result.reason, result.reason


def test_the_real_target_passes_with_the_field_on(builtin_pair, tmp_path: Path) -> None:
    result = _gate(tmp_path, builtin_pair.target, builtin_pair.drafter,
                   write_policy(tmp_path / "policy", ON))
    assert result.approved, result.reason
