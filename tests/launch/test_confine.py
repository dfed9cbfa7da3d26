"""The Landlock layer and the engine's ruleset, enforced on a child Python (this kernel has
Landlock; the tests need it, as `launch --exec` does under `strict`).

The child is this test's interpreter under the ruleset `launch --exec` builds for llama.cpp
(`engine_ruleset`): it reads an approved file and not one beside it, not a file put in place of
the approved one after the ruleset was built, through an HF-cache link only the blob it names;
it binds the serving port and no other, and connects to no port outside the ruleset.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_guard.launch.confine import (
    bytecode_folders,
    confinement,
    engine_ruleset,
    file_rules,
    install_folders,
)
from dflash_guard.launch.landlock import (
    Fs,
    LandlockError,
    Net,
    PathRule,
    PortRule,
    Ruleset,
    abi_version,
)
from tests.support.launch import confined_policy
from tests.support.llamacpp import free_port

CHILD = """
import json, socket, sys
results = {}
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as handle:
            results[path] = handle.read().decode()
    except OSError as error:
        results[path] = error.errno
print(json.dumps(results))
"""


def run_child(ruleset: Ruleset, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`code` run by this interpreter (isolated, no site) under `ruleset`."""
    built = ruleset.build()
    try:
        return subprocess.run([sys.executable, "-I", "-S", "-c", code, *args],
                              preexec_fn=built.enforce, capture_output=True, text=True,
                              timeout=60, check=False)
    finally:
        built.close()


def reads(ruleset: Ruleset, *paths: Path) -> dict[str, str | int]:
    done = run_child(ruleset, CHILD, *map(str, paths))
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("approved")
    (tmp_path / "model" / "planted.jinja").write_text("not approved")
    (tmp_path / "scratch").mkdir()
    return tmp_path


def ruleset_for(folder: Path, files: list[Path], port: int = 1) -> Ruleset:
    return engine_ruleset("llama.cpp", Path(sys.executable), files, port, folder / "scratch")


def test_this_kernel_has_landlock_with_tcp_rules() -> None:
    abi = abi_version()
    assert abi is not None and abi >= 4, abi


def test_an_approved_file_is_read_and_a_file_beside_it_is_not(folder: Path) -> None:
    approved, planted = folder / "model" / "config.json", folder / "model" / "planted.jinja"
    got = reads(ruleset_for(folder, [approved]), approved, planted, folder / "outside.txt")
    assert got == {str(approved): "approved", str(planted): errno.EACCES,
                   str(folder / "outside.txt"): errno.ENOENT}
    # stat is not restricted (docs/limits.md): the child sees the planted file, cannot open it


def test_a_file_replaced_after_the_ruleset_was_built_is_refused(folder: Path) -> None:
    """The rule holds the inode opened when the ruleset was built, not the path."""
    approved = folder / "model" / "config.json"
    built = ruleset_for(folder, [approved]).build()
    replacement = folder / "model" / "new.json"
    replacement.write_text("swapped in")
    os.replace(replacement, approved)  # a new inode at the approved path
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", CHILD, str(approved)],
                              preexec_fn=built.enforce, capture_output=True, text=True,
                              timeout=60, check=False)
    finally:
        built.close()
    assert json.loads(done.stdout) == {str(approved): errno.EACCES}, done.stderr


def test_an_hf_cache_link_reads_its_blob_and_lists_the_snapshot(folder: Path) -> None:
    blobs, snapshot = folder / "cache" / "blobs", folder / "cache" / "snapshots" / "c0ffee"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (blobs / "abc123").write_text("blob")
    (blobs / "other").write_text("another blob")
    (snapshot / "config.json").symlink_to("../../blobs/abc123")
    rules = file_rules([snapshot / "config.json"])
    assert rules == [PathRule(str((blobs / "abc123").resolve()), Fs.READ_FILE),
                     PathRule(str(snapshot.resolve()), Fs.READ_DIR)]
    listing = "import os, sys; print(sorted(os.listdir(sys.argv[1])))"
    ruleset = ruleset_for(folder, [snapshot / "config.json"])
    assert reads(ruleset, snapshot / "config.json", blobs / "other") == {
        str(snapshot / "config.json"): "blob", str(blobs / "other"): errno.EACCES}
    assert run_child(ruleset, listing, str(snapshot)).stdout.strip() == "['config.json']"
    assert run_child(ruleset, listing, str(blobs)).returncode != 0  # no listing of the blobs


def test_the_serving_port_binds_and_no_other_port_binds_or_connects(folder: Path) -> None:
    port, other = free_port(), free_port()
    with socket.socket() as listener:  # a server outside the ruleset, on this machine
        listener.bind(("127.0.0.1", other))
        listener.listen()
        code = """
import socket, sys
port, other = int(sys.argv[1]), int(sys.argv[2])
def attempt(action, number):
    with socket.socket() as s:
        try:
            getattr(s, action)(("127.0.0.1", number))
            return "ok"
        except OSError as error:
            return error.errno
print(attempt("bind", port), attempt("bind", other + 1), attempt("connect", other))
"""
        done = run_child(ruleset_for(folder, [], port), code, str(port), str(other))
    assert done.stdout.split() == ["ok", str(errno.EACCES), str(errno.EACCES)], done.stderr


def test_a_connect_rule_allows_that_port(folder: Path) -> None:
    other = free_port()
    base = ruleset_for(folder, [])
    allowed = Ruleset(base.paths, (*base.ports, PortRule(other, Net.CONNECT_TCP)))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", other))
        listener.listen()
        code = "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])))"
        assert run_child(allowed, code, str(other)).returncode == 0


def test_writes_go_to_the_scratch_folder_only(folder: Path) -> None:
    code = """
import sys
for path in sys.argv[1:]:
    try:
        open(path, "w").write("x")
        print("ok")
    except OSError as error:
        print(error.errno)
"""
    done = run_child(ruleset_for(folder, []), code, str(folder / "scratch" / "f"),
                     str(folder / "model" / "f"), "/dev/null")
    assert done.stdout.split() == ["ok", str(errno.EACCES), "ok"], done.stderr


def test_an_inherited_cache_folder_is_replaced_by_one_in_the_scratch_folder(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's inductor sets `TORCHINDUCTOR_CACHE_DIR` process-wide the first time it compiles;
    a vLLM launched from such a process inherited `/tmp/torchinductor_USER`, outside its
    ruleset, and died at its first compile while serving (the full suite saw it). torch's own
    `cache_dir()`, run under the ruleset, writes in the scratch folder given instead."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(folder / "model" / "inductor"))
    confined = confinement("vllm", Path(sys.executable), [], free_port())
    built = confined.ruleset.build()
    code = ("import os; from torch._inductor.runtime.cache_dir_utils import cache_dir; "
            "d = cache_dir(); open(os.path.join(d, 'x'), 'w').write('x'); print(d)")

    def confined_run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code], env=env, preexec_fn=built.enforce,
                              capture_output=True, text=True, timeout=300, check=False)

    try:
        given = confined_run({**os.environ, **confined.env})
        inherited = confined_run(dict(os.environ))
    finally:
        built.close()
        shutil.rmtree(confined.scratch)
    assert given.returncode == 0, given.stderr[-2000:]
    assert Path(given.stdout.strip()).is_relative_to(confined.scratch)
    assert inherited.returncode != 0 and "Permission denied" in inherited.stderr


def test_the_proved_pythons_bytecode_folder_is_writable(folder: Path) -> None:
    """`launch --approval` runs a package engine's python with a fresh `-X pycache_prefix`:
    the ruleset lets it write there (no import compiles anew on every start), and only an
    interpreter option names it, never an engine argument after `-m`."""
    pycache = folder / "pycache"
    pycache.mkdir()
    argv = ["python", "-I", "-X", f"pycache_prefix={pycache}", "-m", "vllm.server", "-X",
            "pycache_prefix=/etc"]
    assert bytecode_folders(argv) == [pycache]
    ruleset = engine_ruleset("vllm", Path(sys.executable), [], 1, folder / "scratch",
                             bytecode_folders(argv))
    code = "import sys; open(sys.argv[1], 'w').write('x')"
    assert run_child(ruleset, code, str(pycache / "m.pyc")).returncode == 0
    assert run_child(ruleset_for(folder, []), code, str(pycache / "n.pyc")).returncode != 0


def test_the_digest_names_the_rules_not_their_order(folder: Path) -> None:
    config, planted = folder / "model" / "config.json", folder / "model" / "planted.jinja"
    one = ruleset_for(folder, [config, planted])
    two = ruleset_for(folder, [planted, config])
    three = ruleset_for(folder, [config])
    assert one.digest == two.digest != three.digest
    assert one.digest.startswith("sha256:") and len(one.digest) == 7 + 64


def test_a_file_rule_with_folder_rights_is_refused(folder: Path) -> None:
    bad = Ruleset((PathRule(str(folder / "model" / "config.json"), Fs.READ_DIR),), ())
    with pytest.raises(LandlockError, match="file rights only"):
        bad.build()


def test_an_approved_file_gone_before_the_build_is_refused(folder: Path) -> None:
    with pytest.raises(LandlockError, match="gone.json"):
        ruleset_for(folder, [folder / "model" / "gone.json"]).build()


def test_a_venv_program_reads_its_venv_and_the_python_it_links_to() -> None:
    folders = install_folders(Path(sys.executable))
    assert Path(sys.prefix) in folders and Path(sys.base_prefix).resolve() in folders


# `launch --exec`: the engine (a shell script standing in for one) runs under the ruleset

ROOT = Path(__file__).resolve().parents[2]


def exec_launch(lock: Path, policy: Path, program: Path, *roots: str, engine: str = "vllm",
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dflash_guard", "launch", engine, "--lock", str(lock),
         "--policy", str(policy), *[a for r in roots for a in ("--root", r)], "--baseline",
         "--program", str(program), "--exec"],
        capture_output=True, text=True, check=False, timeout=120, cwd=ROOT)


def engine_script(tmp_path: Path, *paths: Path) -> Path:
    """A stand-in engine that tries to read `paths` and prints its scratch variables."""
    program = tmp_path / "bin" / "engine.sh"
    program.parent.mkdir()
    reads = "".join(f'head -c 0 "{p}" && echo "read {p.name}" || echo "denied {p.name}"\n'
                    for p in paths)
    program.write_text(f'#!/bin/sh\n{reads}echo "tmp=$TMPDIR port=$VLLM_PORT"\n')
    program.chmod(0o755)
    return program


def test_exec_runs_the_engine_confined_to_the_verified_folder(padded_pair, padded_lock,
                                                              tmp_path) -> None:
    target = padded_pair.target
    program = engine_script(tmp_path, target / "config.json", padded_lock)
    policy = confined_policy(tmp_path / "policy")
    done = exec_launch(padded_lock, policy, program, f"target={target}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["read config.json", f"denied {padded_lock.name}"], done.stdout
    assert "the engine runs confined (Landlock ABI" in done.stderr
    tmp, port = lines[2].split()
    assert tmp.startswith("tmp=") and "dflash-guard-engine-" in tmp and port == "port=8001"


def test_an_engine_without_a_profile_is_refused_when_required_else_warned(
        padded_pair, padded_lock, tmp_path) -> None:
    program = engine_script(tmp_path, padded_lock)
    policy = confined_policy(tmp_path / "policy")
    target = f"target={padded_pair.target}"
    refused = exec_launch(padded_lock, policy, program, target, engine="sglang")
    assert refused.returncode == 1, refused.stderr
    assert "requires confinement and no confinement profile for sglang" in refused.stdout
    policy.write_text(policy.read_text().replace("confinement: required", "confinement: warn"))
    warned = exec_launch(padded_lock, policy, program, target, engine="sglang")
    assert warned.returncode == 0, warned.stderr
    assert "WARNING: the engine runs UNCONFINED" in warned.stderr
    assert warned.stdout.splitlines()[0] == f"read {padded_lock.name}"  # nothing confined it


def test_strict_requires_confinement() -> None:
    """(`strict` also requires an approval record, `launch --approval`.)"""
    from dflash_guard.trust.policy import load_policy

    strict = load_policy("strict").launch
    assert strict is not None and strict.confinement == "required"
    assert load_policy("default").launch is None  # warn
