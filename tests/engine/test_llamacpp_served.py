"""`launch llama.cpp --verify-served` on the pinned llama-server: the locked deploy (the built-in
pair, each folder holding its f32 GGUF beside the safetensors) is launched, diffed against
kernels_ref as it serves (logprobs, and llama.cpp's acceptance against the locked drafter's),
and recorded; a GGUF served from outside the lock (the command line names the locked GGUF, the
engine loads another with one weight changed) fails the served diff and is stopped.

The engine build is part of the suite: when it fails, these tests fail (never skip).
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from dflash_guard.pins.resolve import build_lock
from kernels_ref.fixtures import make_fixture_pair
from tests.support.llamacpp import build_server, convert, free_port, tamper_one_weight
from tests.support.trust import write_lock, write_policy

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
