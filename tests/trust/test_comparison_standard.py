"""Issue 45: a GGUF comparison record counts only for the file it compared (Q3, P5), and only
when it was held to the policy that judges it (Q7): every prompt of the set, the policy's token
budget, a tolerance no wider than the policy's (or the one measured for the GGUF's precision),
near-ties within the policy's allowance. Otherwise it is refused with the reason."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from dflash_guard.gate.checks import gguf_tolerances
from dflash_guard.pins.resolve import build_lock
from dflash_guard.trust.comparison import comparison_statement, covered_gguf, write_comparison
from dflash_guard.trust.evidence import accepts_record, comparison_records, prompt_set_digest
from dflash_guard.trust.judge import Judge
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.signing import sign_with_key
from tests.support.trust import make_key_pair


def _gguf(path: Path, kind: str = "F32") -> Path:
    """A GGUF with one 2-D weight of tensor type `kind` (F32 or F16)."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    dtype = np.float32 if kind == "F32" else np.float16
    writer.add_tensor("blk.0.attn_q.weight", np.ones((4, 4), dtype=dtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def setup(locked_pair, tmp_path):
    """A gguf folder with A (f32) and B (f16), its lock, an approvals key and a policy maker."""
    folder = tmp_path / "gg"
    folder.mkdir()
    a, b = _gguf(folder / "A-f32.gguf"), _gguf(folder / "B-f16.gguf", "F16")
    lock = build_lock({"target": str(locked_pair.target), "drafter": str(locked_pair.drafter),
                       "gguf": str(folder)}).lock
    private, public = make_key_pair(tmp_path, "approvals")

    def policy(records: list[Path], extra: str = ""):
        listed = "".join(f"  - record: {r}\n" for r in records) or "  []\n"
        path = tmp_path / "p.yaml"
        path.write_text(f"extends: default\nname: p\nsignatures:\n  approvals: {{identities: "
                        f"[], public_keys: [{public}]}}\ngguf_comparisons:\n{listed}{extra}")
        return load_policy(path)

    def record(gguf: Path, name: str, **summary) -> Path:
        base = {"passed": True, "verdict": "identical", "prompts": 12, "max_new_tokens": 32,
                "hard": 0, "near_ties": 0, "near_tie_margin": 0.05,
                "logprobs": {"passed": True, "max_delta": 0.01, "tolerance": 0.05},
                "prompt_set": {"name": "builtin", "digest": {
                    "sha256": prompt_set_digest(load_policy("default"))}}}
        statement = comparison_statement(target_dir=locked_pair.target, gguf=gguf,
                                         summary={**base, **summary}, conversion=None)
        out = tmp_path / name
        write_comparison(statement, out)
        sign_with_key(out, private)
        return out

    return lock, folder, a, b, policy, record


def _tol(lock, folder: Path):
    """The tolerance the gate measures for each locked `.gguf` (its precision)."""
    return gguf_tolerances(lock, {"gguf": folder})


def _judge(policy, lock, folder: Path) -> list[str]:
    judge = Judge(policy, dt.date(2026, 12, 6), provenance_trusted=False)
    return judge.lock(lock, {"gguf": folder}, {}, None, _tol(lock, folder))


# --- a record counts for the file it compared (Q3, P5) ----------------------------------------


def test_q3_one_record_does_not_cover_another_gguf_in_the_folder(setup):
    """Q3: a signed, passed record for A approved a folder that also locks B."""
    lock, folder, a, b, policy, record = setup
    rec_a = record(a, "a.json")
    problems = _judge(policy([rec_a]), lock, folder)
    assert len(problems) == 1 and "B-f16.gguf has no recorded comparison" in problems[0]
    assert "A-f32.gguf" not in problems[0].split(":")[1]
    rec_b = record(b, "b.json", logprobs={"passed": True, "max_delta": 0.01, "tolerance": 0.08})
    assert _judge(policy([rec_a, rec_b]), lock, folder) == []


def test_the_control_without_records_is_refused(setup):
    lock, folder, _, _, policy, _ = setup
    (problem,) = _judge(policy([]), lock, folder)
    assert "A-f32.gguf, B-f16.gguf has no recorded comparison" in problem


def test_a_record_counts_for_the_ggufs_it_names_and_no_stray_one(setup, tmp_path):
    """A record naming A and B (split parts compared together) covers both; one naming a GGUF
    the lock does not hold is about other files, and counts for none."""
    lock, folder, a, b, policy, record = setup
    rec = record(a, "a.json")
    document = json.loads(rec.read_text())
    document["subject"].insert(0, {"name": "gguf/B-f16.gguf", "digest": {
        "sha256": lock.artifact("gguf").file("B-f16.gguf").sha256}})
    rec.write_text(json.dumps(document))
    sign_with_key(rec, tmp_path / "approvals.pem")
    assert comparison_records(policy([rec]), lock, tolerances=_tol(lock, folder))[0] == {
        "A-f32.gguf": "a.json", "B-f16.gguf": "a.json"}
    document["subject"][0]["digest"]["sha256"] = "0" * 64
    rec.write_text(json.dumps(document))
    sign_with_key(rec, tmp_path / "approvals.pem")
    outcome = accepts_record(rec, policy([rec]), lock, tolerances=_tol(lock, folder))
    assert not outcome.ok and "gguf/B-f16.gguf is none of the locked gguf files" in outcome.reason


def test_covered_gguf_is_by_digest(setup, locked_pair, tmp_path):
    """A record covers the locked files with its GGUF's bytes: a copy of A under another name
    is the same comparison; B, with other bytes, is not covered."""
    lock, folder, a, _, _, record = setup
    from dflash_guard.trust.comparison import read_comparison

    statement = read_comparison(record(a, "a.json"))
    assert covered_gguf(statement, lock) == ("A-f32.gguf",)
    (folder / "copy-of-A.gguf").write_bytes(a.read_bytes())
    relocked = build_lock({"target": str(locked_pair.target),
                           "drafter": str(locked_pair.drafter), "gguf": str(folder)}).lock
    assert covered_gguf(statement, relocked) == ("A-f32.gguf", "copy-of-A.gguf")


# --- held to the policy that judges it (Q7) ---------------------------------------------------


@pytest.mark.parametrize(("change", "reason"), [
    ({"max_new_tokens": 1}, "1 new tokens per prompt; the policy's difftest.max_new_tokens is 32"),
    ({"max_new_tokens": None}, "None new tokens"),
    ({"prompts": 1}, "compared 1 prompts of the policy's 12"),
    ({"logprobs": {"passed": True, "max_delta": 0.3, "tolerance": 50.0}},
     "tolerance 50.0 (largest difference 0.3) is wider than the policy accepts (0.05, the one "
     "measured for float32)"),
    ({"logprobs": {"passed": True, "max_delta": 0.9, "tolerance": 0.05}}, "largest difference"),
    ({"logprobs": {"passed": True, "max_delta": 0.01, "tolerance": "0.01"}}, "tolerance '0.01'"),
    ({"logprobs": {"passed": True, "max_delta": 0.01, "tolerance": float("nan")}}, "tolerance"),
    ({"near_ties": 12, "near_tie_margin": 5.0}, "excused 12 near-ties within 5.0 nats; the "
     "policy's difftest.near_tie_allowance is 0"),
    ({"near_ties": -1}, "not a count"),
    ({"hard": 2}, "2 hard divergences"),
])
def test_q7_a_lax_record_is_refused_with_the_reason(setup, change, reason):
    lock, folder, a, _, policy, record = setup
    rec = record(a, "a.json", **change)
    outcome = accepts_record(rec, policy([rec]), lock, tolerances=_tol(lock, folder))
    assert not outcome.ok
    assert "held to less than the policy" in outcome.reason or "prompt" in outcome.reason
    assert reason in outcome.reason


def test_the_tolerance_follows_the_ggufs_precision_or_the_policy(setup):
    """B is f16: 0.08 measured, so a 0.08 record passes for B, and is too wide for f32 A; a
    policy's own max_logprob_delta replaces the measured one."""
    lock, folder, a, b, policy, record = setup
    wide = {"logprobs": {"passed": True, "max_delta": 0.01, "tolerance": 0.08}}
    rec_b, rec_a = record(b, "b.json", **wide), record(a, "a.json", **wide)
    assert accepts_record(rec_b, policy([rec_b]), lock, tolerances=_tol(lock, folder)).ok
    assert "0.05, the one measured for float32" in accepts_record(
        rec_a, policy([rec_a]), lock, tolerances=_tol(lock, folder)).reason
    looser = policy([rec_a], "difftest:\n  max_logprob_delta: 0.1\n")
    assert accepts_record(rec_a, looser, lock, tolerances=_tol(lock, folder)).ok
    # no folder to read the precision from, and no policy tolerance: cannot tell, refused
    assert "cannot be judged" in accepts_record(rec_a, policy([rec_a]), lock).reason


def test_near_ties_within_the_policys_allowance_count(setup):
    lock, folder, a, _, policy, record = setup
    rec = record(a, "a.json", near_ties=1, near_tie_margin=0.05)
    assert not accepts_record(rec, policy([rec]), lock, tolerances=_tol(lock, folder)).ok
    allowing = policy([rec], "difftest:\n  near_tie_allowance: 0.1\n")
    assert accepts_record(rec, allowing, lock, tolerances=_tol(lock, folder)).ok
    covered, why_not = comparison_records(allowing, lock, tolerances=_tol(lock, folder))
    assert covered == {"A-f32.gguf": "a.json"} and why_not == []
