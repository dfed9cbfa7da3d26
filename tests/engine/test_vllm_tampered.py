"""A vLLM DFlash server on a target that is not the locked one, issue 38's drift (one MLP matrix
scaled by 1.02: same tokenizer and config, greedy tokens that mostly agree), served under the
locked target's name: `launch` refuses to start it (the folder does not match the lock), and when
it is started anyway, the reference diff against kernels_ref on the locked target refuses it by
its logprobs (exit 1: the served model is not the locked one), and so does the gate, whose other
checks (the local files, the endpoint diff) all pass. Then the locked target with a swapped
drafter (the rows of its matrices shuffled): lossless, its tokens and logprobs are the target's,
and the gate refuses it by its acceptance against kernels_ref's with the locked drafter. Its own
module: one more server at a time, started after the others have stopped (memory)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_guard.gate import EndpointOverrides, GateOptions, run_gate
from dflash_guard.pins.resolve import build_lock
from kernels_ref.fixtures import make_fixture_pair
from tests.support.kernels import drifted_target, swapped_drafter
from tests.support.launch import LAUNCH
from tests.support.llamacpp import free_port
from tests.support.trust import write_lock, write_policy
from tests.support.vllm import (
    GATE_DIFFTEST,
    SERVE_ARGS,
    gate_endpoints,
    install,
    launch_argv,
    vllm_servers,
)

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]


def test_a_candidate_serving_a_changed_target_is_refused(cli, tmp_path):
    target, drafter = make_fixture_pair(tmp_path / "hd64", head_dim=64)
    small_target, _ = make_fixture_pair(tmp_path / "hd16")
    lock = write_lock(build_lock({"target": str(target), "drafter": str(drafter)}).lock,
                      tmp_path / "vllm.lock")
    policy = write_policy(tmp_path / "policy")
    policy.write_text(policy.read_text() + LAUNCH)
    python = str(install())
    argv = launch_argv("--lock", str(lock), "--policy", str(policy), "--program", python,
                       "--root", f"target={target}", "--root", f"drafter={drafter}",
                       "--port", str(free_port()), "--", *SERVE_ARGS)
    changed = drifted_target(target, tmp_path / "changed")
    refused = cli("launch", "vllm", "--lock", lock, "--policy", policy, "--root",
                  f"target={changed}", "--root", f"drafter={drafter}")
    assert refused.exit_code == 1 and "model.safetensors" in refused.stdout
    # started anyway, by hand, under the locked target's name: nothing in the API tells it apart
    model = argv.index("--model") + 1
    argv[model:model + 1] = [str(changed), "--served-model-name", str(target)]
    with vllm_servers(argv) as [candidate]:
        done = subprocess.run(
            [sys.executable, "-m", "dflash_guard", "difftest", "reference", "--target",
             str(small_target), "--candidate", candidate.url, "--format", "json", "--quiet"],
            capture_output=True, text=True, check=False, cwd=ROOT, timeout=900)
        # the one engine plays both sides of the endpoint diff: it agrees with itself
        gate = run_gate(GateOptions(lock, policy, {"target": target, "drafter": drafter},
                                    out=tmp_path / "approval.json",
                                    endpoints=EndpointOverrides(candidate.url, candidate.url)))
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "wrong-model" and not report["passed"]
    assert report["logprobs"]["max_delta"] > 2 * report["logprobs"]["tolerance"]
    assert report["wrong_model"].startswith("the served model is not the locked one")
    assert str(target) in report["wrong_model"]  # the name it was served under
    assert not gate.approved and not (tmp_path / "approval.json").exists()
    assert [c.name for c in gate.checks if not c.outcome.ok] == ["reference diff"], gate.reason
    assert gate.reason.startswith("reference diff: the candidate does not serve the locked "
                                  "target: the served model is not the locked one"), gate.reason


def test_a_candidate_drafting_with_another_drafter_is_refused(tmp_path):
    target, drafter = make_fixture_pair(tmp_path / "hd64", head_dim=64)
    lock = write_lock(build_lock({"target": str(target), "drafter": str(drafter)}).lock,
                      tmp_path / "vllm.lock")
    policy = write_policy(tmp_path / "policy")
    policy.write_text(policy.read_text() + LAUNCH)
    argv = launch_argv("--lock", str(lock), "--policy", str(policy), "--program",
                       str(install()), "--root", f"target={target}", "--root",
                       f"drafter={drafter}", "--port", str(free_port()), "--", *SERVE_ARGS)
    swapped = swapped_drafter(drafter, tmp_path / "swapped")
    config = argv.index("--speculative-config") + 1
    argv[config] = argv[config].replace(str(drafter), str(swapped))
    assert str(swapped) in argv[config]
    with vllm_servers(argv) as [candidate]:
        gate_policy = write_policy(tmp_path / "gate", (GATE_DIFFTEST, gate_endpoints(
            candidate.url, candidate.url, 32)))
        gate = run_gate(GateOptions(lock, gate_policy, {"target": target, "drafter": drafter},
                                    out=tmp_path / "approval.json"))
    assert not gate.approved and not (tmp_path / "approval.json").exists()
    assert [c.name for c in gate.checks if not c.outcome.ok] == ["reference diff"], gate.reason
    assert gate.reason.startswith("reference diff: the candidate does not draft with the locked "
                                  "drafter: the engine does not draft like the locked drafter"
                                  ), gate.reason
