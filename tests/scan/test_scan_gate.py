"""The gate against the adaptive corpus: each malicious case laid into the built-in drafter, with
every Python file of the folder on the reviewed list (a normal production setup), is refused at
the scan step under `default` and under `strict` (its scan settings, tier official), unless what
makes it malicious is that Python itself: a review means a person read that code, so the gate
approves it and the scan keeps the finding for the reviewer; unreviewed, the gate refuses it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.scan import scan_paths
from tests.scan.adaptive import MALICIOUS, Case
from tests.support.trust import REPO, copy_folder, make_key_pair, relock, write_lock, write_policy

# strict's scan settings for a local folder treated as official (reviewed code allowed), no
# lockfile signature: the refusal must come from what the scan finds, not from a missing key.
_STRICT = (("local_tier: unknown", "local_tier: official"),
           ("lockfile_required: true", "lockfile_required: false"))


CODE = [case for case in MALICIOUS if case.culprit.endswith(".py")]
# Cases whose culprit no engine of the deploy opens (`pins.loaded`): an image beside the weights.
NOT_LOADED = {"image-with-zip"}
NOT_CODE = [case for case in MALICIOUS
            if not case.culprit.endswith(".py") and case.name not in NOT_LOADED]


def _gate(tmp_path: Path, locked_pair, case: Case, policy_name: str, review: bool = True):
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    case.lay(drafter)
    reviewed = tuple(hashlib.sha256(p.read_bytes()).hexdigest() for p in drafter.rglob("*.py")
                     if review)
    if policy_name == "strict":
        base = (REPO / "policies" / "strict.yaml").read_text()
        # strict names no signer (a policy extends it and names its own): name a model signer,
        # so the policy can pass at all and the refusal has to come from the scan.
        _, public = make_key_pair(tmp_path)
        signer = ("  models: {identities: [], public_keys: []}",
                  f"  models: {{identities: [], public_keys: [{public}]}}")
        policy = write_policy(tmp_path / "policy", *_STRICT, signer, base=base.replace(
            "max_new_tokens: 64", "max_new_tokens: 32"), reviewed=reviewed)
    else:
        policy = write_policy(tmp_path / "policy", reviewed=reviewed)
    lock = write_lock(relock(locked_pair, drafter), tmp_path / "dflash.lock")
    roots = {"target": locked_pair.target, "drafter": drafter}
    return run_gate(GateOptions(lock, policy, roots, out=tmp_path / "approval.json"))


@pytest.mark.parametrize("policy_name", ["default", "strict"])
@pytest.mark.parametrize("case", NOT_CODE, ids=lambda c: c.name)
def test_gate_refuses_every_malicious_case(tmp_path, locked_pair, case, policy_name):
    result = _gate(tmp_path, locked_pair, case, policy_name)
    assert not result.approved
    assert result.checks[-1].name == "scan", result.reason
    assert all(c.outcome.ok for c in result.checks[:-1]), result.reason
    assert case.shows_in(result.reason), result.reason


@pytest.mark.parametrize("case", [c for c in MALICIOUS if c.name in NOT_LOADED],
                         ids=lambda c: c.name)
def test_a_culprit_no_engine_loads_is_recorded_apart_and_blocks_nothing(tmp_path, locked_pair,
                                                                        case):
    result = _gate(tmp_path, locked_pair, case, "default")
    assert result.approved, result.reason
    scan = next(row for row in result.checks if row.name == "scan")
    section = scan.evidence.to_json()["roles"]["drafter"]
    assert case.culprit in {entry["path"] for entry in section["not_loaded_files"]}
    assert case.culprit not in section["loaded_files"] and section["not_loaded_findings"] >= 1


@pytest.mark.parametrize("case", CODE, ids=lambda c: c.name)
def test_gate_refuses_malicious_code_nobody_reviewed(tmp_path, locked_pair, case):
    result = _gate(tmp_path, locked_pair, case, "default", review=False)
    assert not result.approved
    assert result.checks[-1].name == "scan", result.reason
    assert case.shows_in(result.reason), result.reason


@pytest.mark.parametrize("case", CODE, ids=lambda c: c.name)
def test_reviewed_code_is_approved_and_its_findings_stay_for_the_reviewer(tmp_path, case):
    case.lay(tmp_path)
    reviewed = frozenset(hashlib.sha256(p.read_bytes()).hexdigest()
                         for p in tmp_path.rglob("*.py"))
    report = scan_paths([tmp_path], reviewed_sha256=reviewed)
    kept = [f for f in report.findings if case.shows_in(f.file) and report.for_reviewer(f)]
    assert kept and not report.blocking(), report.findings
    assert report.to_json()["summary"]["reviewed_code_findings"] >= len(kept)
