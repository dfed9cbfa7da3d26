"""The gate proves the files the engines load (issue 44, item 2): Q2 (a second safetensors file
vLLM loads and kernels_ref never read) and Q1 (the target GGUF llama.cpp serves, compared with
nothing) of ../shared/docs/attack-findings-2026-12-06.md, each with its benign twin."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
from pathlib import Path

from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.gate.checks import gguf_tolerances
from dflash_guard.pins.resolve import build_lock
from dflash_guard.trust.comparison import comparison_statement, write_comparison
from dflash_guard.trust.evidence import prompt_set_digest
from dflash_guard.trust.judge import Judge
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.signing import sign_with_key
from tests.support.layouts import override, shard, write_gguf
from tests.support.trust import make_key_pair, write_lock, write_policy


def _gate(tmp_path: Path, target: Path, drafter: Path, *replacements: tuple[str, str]):
    lock = build_lock({"target": str(target), "drafter": str(drafter)}).lock
    lock_path = write_lock(lock, tmp_path / "dflash.lock")
    policy = write_policy(tmp_path / "policy", *replacements)
    return run_gate(GateOptions(lock_path, policy, {"target": target, "drafter": drafter},
                                out=tmp_path / "approval.json"))


def _last(result) -> tuple[str, str]:
    assert not result.approved
    assert all(c.outcome.ok for c in result.checks[:-1]), result.reason
    return result.checks[-1].name, result.reason


def test_q2_gate_refuses_a_second_safetensors_vllm_would_load(tmp_path, builtin_pair):
    target = Path(shutil.copytree(builtin_pair.target, tmp_path / "t"))
    override(target)
    step, reason = _last(_gate(tmp_path, target, builtin_pair.drafter))
    assert step == "verify"
    assert "zz-override.safetensors" in reason and "ambiguous weight set" in reason


def test_q2_benign_twin_a_real_index_with_shards_is_approved(tmp_path, builtin_pair):
    """kernels_ref decodes both shards, and the diff test passes on them."""
    target = Path(shutil.copytree(builtin_pair.target, tmp_path / "t"))
    shard(target)
    result = _gate(tmp_path, target, builtin_pair.drafter)
    assert result.approved, result.reason


def _target_with_gguf(tmp_path: Path, builtin_pair) -> Path:
    target = Path(shutil.copytree(builtin_pair.target, tmp_path / "t"))
    write_gguf(target / "target.gguf")
    return target


def _judge(lock, target: Path, policy: Path) -> list[str]:
    locations = {"target": target}  # the gate measures each GGUF's tolerance (issue 45)
    return Judge(load_policy(policy), dt.date.today(), False).lock(
        lock, locations, {}, None, gguf_tolerances(lock, locations))


def _signed_record(tmp_path: Path, target: Path, gguf: Path) -> Path:
    """A policy accepting a signed, passed comparison record of `gguf` against `target`."""
    private, public = make_key_pair(tmp_path, "approvals")
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY.format(public=public))
    summary = {"passed": True, "verdict": "identical", "prompts": 12, "max_new_tokens": 32,
               "hard": 0, "near_ties": 0, "near_tie_margin": 0.05,  # held to the policy
               "logprobs": {"passed": True, "max_delta": 1e-5, "tolerance": 0.05},
               "prompt_set": {"name": "builtin", "digest": {
                   "sha256": prompt_set_digest(load_policy(policy))}}}
    record = tmp_path / "comparison.json"
    write_comparison(comparison_statement(target_dir=target, gguf=gguf, summary=summary,
                                          conversion=None), record)
    sign_with_key(record, private)
    policy.write_text(POLICY.format(public=public) + f"gguf_comparisons:\n  - record: {record}\n")
    return policy


POLICY = ("extends: default\nname: p\nsignatures:\n  approvals: "
          "{{identities: [], public_keys: [{public}]}}\n")


def test_q1_a_target_gguf_no_record_compared_is_refused(tmp_path, builtin_pair):
    target = _target_with_gguf(tmp_path, builtin_pair)
    lock = build_lock({"target": str(target), "drafter": str(builtin_pair.drafter)}).lock
    policy = tmp_path / "p.yaml"
    policy.write_text("extends: default\nname: p\n")
    problems = _judge(lock, target, policy)
    assert any(p.startswith("target/target.gguf: llama.cpp serves it as --model, and no "
                            "accepted comparison record covers it") for p in problems)


def test_q1_benign_twin_a_signed_record_of_that_gguf_covers_it(tmp_path, builtin_pair):
    target = _target_with_gguf(tmp_path, builtin_pair)
    lock = build_lock({"target": str(target), "drafter": str(builtin_pair.drafter)}).lock
    policy = _signed_record(tmp_path, target, target / "target.gguf")
    assert _judge(lock, target, policy) == []
    # the same record, once the target GGUF is another file, covers nothing
    write_gguf(target / "target.gguf", (0, 1))
    lock = build_lock({"target": str(target), "drafter": str(builtin_pair.drafter)}).lock
    assert any("no accepted comparison record covers it" in p
               for p in _judge(lock, target, policy))


def test_q1_a_record_naming_part_1_only_does_not_cover_a_split_target(tmp_path, builtin_pair):
    target = Path(shutil.copytree(builtin_pair.target, tmp_path / "t"))
    write_gguf(target / "m-00001-of-00002.gguf", (0, 2))
    write_gguf(target / "m-00002-of-00002.gguf", (1, 2))
    lock = build_lock({"target": str(target), "drafter": str(builtin_pair.drafter)}).lock
    policy = _signed_record(tmp_path, target, target / "m-00001-of-00002.gguf")
    assert _judge(lock, target, policy) == []  # the record names both parts
    record = tmp_path / "comparison.json"
    statement = comparison_statement(target_dir=target, gguf=target / "m-00001-of-00002.gguf",
                                     summary={}, conversion=None)
    names = [s.name for s in statement.subjects if s.name.startswith("gguf/")]
    assert names == ["gguf/m-00001-of-00002.gguf", "gguf/m-00002-of-00002.gguf"]
    assert record.is_file()


def test_q1_the_lock_the_attack_approved_is_now_refused_by_launch(tmp_path, builtin_pair):
    from dflash_guard.launch.plan import LaunchOptions, plan_launch
    from dflash_guard.outcome import Outcome

    target = _target_with_gguf(tmp_path, builtin_pair)
    drafter = Path(shutil.copytree(builtin_pair.drafter, tmp_path / "d"))
    write_gguf(drafter / "drafter.gguf")
    lock = build_lock({"target": str(target), "drafter": str(drafter)}).lock
    policy = tmp_path / "p.yaml"
    policy.write_text("extends: default\nname: p\n")
    options = LaunchOptions("llama.cpp", {"target": target, "drafter": drafter},
                            num_speculative_tokens=7)
    planned = plan_launch(lock, load_policy(policy), options)
    assert isinstance(planned, Outcome) and not planned.ok
    assert "target/target.gguf: llama.cpp serves it as --model" in planned.reason
    dev = plan_launch(lock, load_policy("dev"), dataclasses.replace(options))
    assert not isinstance(dev, Outcome)  # dev does not require comparisons


def test_q1_gate_refuses_the_attack_lock(tmp_path, builtin_pair):
    """The attack's `gate` (a target folder holding the locked safetensors and a GGUF no one
    compared, default policy): APPROVED before, refused at the policy step now."""
    target = _target_with_gguf(tmp_path, builtin_pair)
    step, reason = _last(_gate(tmp_path, target, builtin_pair.drafter))
    assert (step, reason.split(" (")[0]) == (
        "policy", "policy: target/target.gguf: llama.cpp serves it as --model, and no accepted "
        "comparison record covers it")
