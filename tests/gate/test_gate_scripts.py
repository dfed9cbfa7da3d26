"""scripts/pre-deploy-gate.sh: its exit status is the gate's decision."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.trust import REPO, write_lock

SCRIPT = REPO / "scripts" / "pre-deploy-gate.sh"


def _run(*args, cwd):
    env = {**os.environ, "DFLASH_GUARD": f"{sys.executable} -m dflash_guard",
           "PYTHONPATH": str(REPO)}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_gate_script_refuses_unsigned_lock_under_strict(locked_pair, tmp_path):
    write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = _run("--root", f"target={locked_pair.target}",
                  "--root", f"drafter={locked_pair.drafter}", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "pre-deploy gate: REFUSED" in result.stderr
    assert "names no lockfile signer" in " ".join(result.stdout.split())
    assert not (tmp_path / "approval.json").exists()


def test_gate_script_input_error_is_exit_2(tmp_path):
    result = _run("--lock", tmp_path / "missing.lock", cwd=tmp_path)
    assert result.returncode == 2
    assert "pre-deploy gate: ERROR" in result.stderr


def test_gate_script_strict_is_the_builtin_even_with_a_file_named_strict(locked_pair, tmp_path):
    """Issue 15 item 2: a permissive file called `strict` in the working folder is not used."""
    dev = (REPO / "policies" / "dev.yaml").read_text()
    (tmp_path / "strict").write_text(dev.replace("name: dev", "name: strict", 1))
    write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = _run("--root", f"target={locked_pair.target}",
                  "--root", f"drafter={locked_pair.drafter}", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "names no lockfile signer" in " ".join(result.stdout.split())
    assert not (tmp_path / "approval.json").exists()


def test_gate_script_takes_every_spelling_of_the_output(locked_pair, tmp_path):
    """`-o` and `--output` each replace the script's default record path."""
    write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    roots = ("--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}")
    for flag in ("-o", "--output"):
        record = tmp_path / f"approval{flag}.json"
        result = _run("--policy", "dev", *roots, flag, record, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert record.is_file() and not (tmp_path / "approval.json").exists()
