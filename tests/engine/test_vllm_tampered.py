"""A vLLM DFlash server on a target that is not the locked one, issue 38's drift (one MLP matrix
scaled by 1.02: same tokenizer and config, greedy tokens that mostly agree): `launch` refuses to
start it (the folder does not match the lock), and when it is started anyway, the reference diff
against kernels_ref on the locked target refuses it by its logprobs (exit 1: the served model is
not the locked one). Its own module: one more server, started after the others have stopped
(memory)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_guard.pins.resolve import build_lock
from kernels_ref.fixtures import make_fixture_pair
from tests.support.kernels import drifted_target
from tests.support.launch import LAUNCH
from tests.support.llamacpp import free_port
from tests.support.trust import write_lock, write_policy
from tests.support.vllm import SERVE_ARGS, install, launch_argv, vllm_servers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

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
    argv[argv.index("--model") + 1] = str(changed)  # started anyway, by hand
    with vllm_servers(argv) as [candidate]:
        done = subprocess.run(
            [sys.executable, "-m", "dflash_guard", "difftest", "reference", "--target",
             str(small_target), "--candidate", candidate.url, "--format", "json", "--quiet"],
            capture_output=True, text=True, check=False, cwd=ROOT, timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "wrong-model" and not report["passed"]
    assert report["logprobs"]["max_delta"] > 2 * report["logprobs"]["tolerance"]
