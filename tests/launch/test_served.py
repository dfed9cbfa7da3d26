"""`launch --verify-served`: the started engine diffed against kernels_ref on the verified
folders (logprobs and the drafter's acceptance), its serving record, and `monitor --record`.

The engine is `kernels_ref.serve` behind a `--program` shim (`tests.support.fake_engine`)
reading the vLLM command line launch writes; a drifted target or a swapped drafter behind the
same command line is the deploy that does not serve what was approved. The engine child runs
under the Landlock ruleset `launch --exec` builds (the approved files, its install, its ports),
launch itself unconfined; the other weights such a deploy serves sit in the engine's install
folder (the shim's), the one place outside the approved files the ruleset lets it read. Real
engines: tests/engine/test_llamacpp_served.py, tests/engine/test_*_confined.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_guard.cli.monitor_cmd import verified_baseline
from dflash_guard.errors import InputError
from dflash_guard.launch import confine
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.trust.serving import PREDICATE_TYPE
from tests.support.fake_engine import INSTALL, shim
from tests.support.kernels import drifted_target, swapped_drafter
from tests.support.trust import make_key_pair, one_line, write_lock, write_policy

pytestmark = pytest.mark.slow  # a reference-server subprocess per test, a few seconds each

ROOT = Path(__file__).resolve().parents[2]
NO_SIGNERS = "  approvals: {identities: [], public_keys: []}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serving(port: int) -> bool:
    """Whether anything accepts connections on the port (the engine left running)."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(autouse=True)
def fake_engine_install(monkeypatch):
    """The stand-in engine runs this checkout in this venv: readable to it, as an install."""
    monkeypatch.setattr(confine, "SYSTEM", (*confine.SYSTEM, *INSTALL))


@pytest.fixture
def deploy(locked_pair, tmp_path):
    """The lock, a policy whose approval signer is a fresh key, and the key."""
    private, public = make_key_pair(tmp_path)
    policy = write_policy(tmp_path / "policy", (NO_SIGNERS, NO_SIGNERS.replace(
        "public_keys: []", f"public_keys: [{public}]")))
    return write_lock(locked_pair.lock, tmp_path / "dflash.lock"), policy, private


def launch(cli, locked_pair, deploy, program: Path, port: int, record: Path, *extra: str):
    lock, policy, key = deploy
    return cli("launch", "vllm", "--lock", lock, "--policy", policy,
               "--root", f"target={locked_pair.target}", "--root",
               f"drafter={locked_pair.drafter}", "--program", program, "--port", str(port),
               "--verify-served", "--serving-record", record, "--key", key, "--quiet", *extra)


def test_a_served_deploy_that_matches_passes_and_is_recorded(cli, locked_pair, deploy,
                                                             tmp_path):
    program, port, record = shim(tmp_path / "bin"), free_port(), tmp_path / "serving.json"
    result = launch(cli, locked_pair, deploy, program, port, record, "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] and report["reason"].startswith("served diff: 2 prompts match")
    assert "drafter: tau" in report["reason"]
    assert not serving(port)  # without --exec the engine is stopped after the check
    statement = json.loads(record.read_text())
    predicate = statement["predicateType"], statement["predicate"]
    assert predicate[0] == PREDICATE_TYPE
    body = predicate[1]
    assert body["passed"] and body["served_diff"]["drafter"]["passed"]
    assert body["served_diff"]["logprobs"]["passed"]
    assert statement["subject"] == [{"name": "dflash.lock",
                                     "digest": {"sha256": sha256_file(deploy[0])}}]
    assert body["approval"] is None
    digest = body["confinement"]["ruleset_digest"]  # the engine ran confined, under this
    assert digest.startswith("sha256:") and f"ruleset {digest}" in result.stderr
    assert body["engine"]["digest"] == {"sha256": sha256_file(program)}
    assert body["engine"]["module"] == "vllm.entrypoints.openai.api_server"
    assert body["endpoint"] == f"http://127.0.0.1:{port}"
    assert body["acceptance_length"] > 1.5
    # monitor --record takes the engine's tau as it served, from the signed record
    assert verified_baseline(record, str(deploy[1])) == body["acceptance_length"]


def test_a_drifted_served_model_fails_and_the_engine_is_stopped(cli, locked_pair, deploy,
                                                               tmp_path):
    """The command line names the verified folders; the engine serves other weights (one
    matrix scaled by 1.02): the logprobs give it away, launch stops it and exits 1."""
    drifted = drifted_target(locked_pair.target, tmp_path / "bin" / "drifted")
    program = shim(tmp_path / "bin", target=drifted)
    port, record = free_port(), tmp_path / "serving.json"
    result = launch(cli, locked_pair, deploy, program, port, record)
    assert result.exit_code == 1, result.stderr
    assert "refused: served diff: the engine does not serve the locked target" in one_line(
        result.stdout)
    assert not serving(port)
    body = json.loads(record.read_text())["predicate"]
    assert body["passed"] is False and "does not serve the locked target" in body["reason"]
    with pytest.raises(InputError, match="its served diff did not pass"):
        verified_baseline(record, str(deploy[1]))


def test_a_swapped_drafter_fails_the_served_diff(cli, locked_pair, deploy, tmp_path):
    """Lossless, the engine commits the target's tokens whatever it drafts with: the drafter
    check (on by default, no URL configured) holds its acceptance to the locked drafter's."""
    swapped = swapped_drafter(locked_pair.drafter, tmp_path / "bin" / "swapped")
    program = shim(tmp_path / "bin", drafter=swapped)
    port, record = free_port(), tmp_path / "serving.json"
    result = launch(cli, locked_pair, deploy, program, port, record)
    assert result.exit_code == 1, result.stderr
    assert "does not draft with the locked drafter" in one_line(result.stdout)
    assert not serving(port)


def test_an_engine_that_never_serves_is_refused(cli, locked_pair, deploy, tmp_path):
    program = tmp_path / "bin" / "python"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\nexit 3\n")
    program.chmod(0o755)
    result = launch(cli, locked_pair, deploy, program, free_port(), tmp_path / "s.json")
    assert result.exit_code == 1
    assert "the engine exited (3) before it served" in one_line(result.stdout)


def test_monitor_refuses_an_unsigned_serving_record(cli, locked_pair, deploy, tmp_path):
    program, record = shim(tmp_path / "bin"), tmp_path / "serving.json"
    assert launch(cli, locked_pair, deploy, program, free_port(), record).exit_code == 0
    Path(f"{record}.sig").unlink()
    with pytest.raises(InputError, match="not signed by an approval signer"):
        verified_baseline(record, str(deploy[1]))


def test_key_only_with_verify_served(cli, deploy, tmp_path):
    lock, policy, key = deploy
    keyed = cli("launch", "vllm", "--lock", lock, "--policy", policy, "--key", key)
    assert keyed.exit_code == 2 and "--key: only with --verify-served" in keyed.stderr


# `python -m dflash_guard` with the stand-in engine's install readable to it (`INSTALL`)
LAUNCH_WITH_FAKE_INSTALL = (
    "import sys; from dflash_guard.launch import confine; "
    f"confine.SYSTEM += {INSTALL!r}; "
    "from dflash_guard._cli import main; main(sys.argv[1:])")


def test_exec_keeps_the_verified_engine_serving_until_launch_is_stopped(locked_pair, deploy,
                                                                        tmp_path):
    """--exec --verify-served: launch supervises the engine; SIGTERM to launch stops both."""
    lock, policy, key = deploy
    program, port, record = shim(tmp_path / "bin"), free_port(), tmp_path / "serving.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCH_WITH_FAKE_INSTALL, "launch", "vllm", "--lock", str(lock),
         "--policy", str(policy), "--root", f"target={locked_pair.target}", "--root",
         f"drafter={locked_pair.drafter}", "--program", str(program), "--port", str(port),
         "--verify-served", "--exec", "--serving-record", str(record), "--quiet"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not record.exists() and process.poll() is None:
            time.sleep(0.2)
        assert process.poll() is None, process.communicate()
        assert json.loads(record.read_text())["predicate"]["passed"]
        while process.poll() is None and not serving(port):  # the record, then the engine
            time.sleep(0.1)
        assert serving(port)  # still serving after the diff, supervised
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "served diff: 2 prompts match" in stderr
    assert "the engine runs confined (Landlock ABI" in stderr
    assert not serving(port)


def test_the_confined_engine_cannot_read_outside_the_approval(cli, locked_pair, deploy,
                                                              tmp_path):
    """The drifted weights outside the engine's install and the approved files: the confined
    engine cannot open them and exits before it serves (launch, unconfined, reads them)."""
    drifted = drifted_target(locked_pair.target, tmp_path / "drifted")
    # the shim is named python: its install is the folder above its own (`install_folders`)
    program = shim(tmp_path / "engine" / "bin", target=drifted)
    port, record = free_port(), tmp_path / "serving.json"
    result = launch(cli, locked_pair, deploy, program, port, record)
    assert result.exit_code == 1, result.stderr
    assert "before it served" in one_line(result.stdout)
    assert not serving(port)
    assert json.loads(record.read_text())["predicate"]["passed"] is False
    assert (drifted / "config.json").read_bytes()  # launch's own process is not confined


def no_landlock(monkeypatch) -> None:
    monkeypatch.setattr(confine, "abi_version", lambda: None)


def required(policy: Path) -> Path:
    policy.write_text(policy.read_text() + "launch:\n  confinement: required\n")
    return policy


def test_without_landlock_the_engine_runs_unconfined_loudly_and_recorded_so(
        cli, locked_pair, deploy, tmp_path, monkeypatch):
    no_landlock(monkeypatch)
    program, port, record = shim(tmp_path / "bin"), free_port(), tmp_path / "serving.json"
    result = launch(cli, locked_pair, deploy, program, port, record)
    assert result.exit_code == 0, result.stderr
    assert "WARNING: the engine runs UNCONFINED" in result.stderr
    assert "this kernel has no Landlock" in result.stderr
    body = json.loads(record.read_text())["predicate"]
    assert body["passed"] and body["confinement"] == {"ruleset_digest": None}


def test_a_policy_requiring_confinement_serves_confined(cli, locked_pair, deploy, tmp_path):
    lock, policy, _ = deploy
    program, port, record = shim(tmp_path / "bin"), free_port(), tmp_path / "serving.json"
    result = launch(cli, locked_pair, (lock, required(policy), deploy[2]), program, port,
                    record)
    assert result.exit_code == 0, result.stderr
    assert json.loads(record.read_text())["predicate"]["confinement"]["ruleset_digest"]


def test_a_policy_requiring_confinement_refuses_without_landlock(cli, locked_pair, deploy,
                                                                tmp_path, monkeypatch):
    """Fail closed: nothing is started, no record is written."""
    no_landlock(monkeypatch)
    lock, policy, key = deploy
    port, record = free_port(), tmp_path / "s.json"
    result = launch(cli, locked_pair, (lock, required(policy), key), shim(tmp_path / "bin"),
                    port, record)
    assert result.exit_code == 1, result.stderr
    assert ("refused: --verify-served: the policy requires confinement and this kernel has "
            "no Landlock") in one_line(result.stdout)
    assert not record.exists() and not serving(port)
