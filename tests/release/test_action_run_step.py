"""N27: the action's run step gives each command only the options it has.

The run step of action.yml, extracted and run as the runner runs it, for verify, gate, audit and
scan with every input set (roots and sarif included): no command ends in a usage error. The
installed-wheel variant of these runs is in test_release_install.py (slow); here `dflash-guard`
on PATH is this checkout's, so the step is checked on every test run.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from tests.support.release import run_action_step


@pytest.fixture
def runner(tmp_path: Path) -> dict[str, str]:
    """The runner's variables, with a `dflash-guard` on PATH that runs this checkout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "dflash-guard"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m dflash_guard "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    path = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    return {**os.environ, "PATH": path, "GITHUB_OUTPUT": str(tmp_path / "github_output"),
            "OMP_NUM_THREADS": "1"}


@pytest.fixture
def locked(cli, builtin_pair, tmp_path: Path) -> dict[str, str]:
    """A lock of the fixture pair, its roots (one per line) and an empty advisory feed."""
    target, drafter = builtin_pair.target, builtin_pair.drafter
    lock = tmp_path / "dflash.lock"
    assert cli("lock", "--target", target, "--drafter", drafter, "-o", lock).exit_code == 0
    (tmp_path / "feed.json").write_text("[]")
    return {"lockfile": str(lock), "roots": f"target={target}\ndrafter={drafter}\n",
            "feed": str(tmp_path / "feed.json")}


def run_step(runner: dict[str, str], cwd: Path, inputs: dict[str, str]):
    Path(runner["GITHUB_OUTPUT"]).unlink(missing_ok=True)
    result = run_action_step("run", inputs, runner, cwd)
    output = Path(runner["GITHUB_OUTPUT"]).read_text()
    return result, output


@pytest.mark.parametrize(
    ("command", "codes", "sarif_written", "warning"),
    [
        ("verify", {0}, False, "the sarif input is ignored: verify writes no SARIF"),
        ("gate", {0, 1}, False, "the sarif input is ignored: gate writes no SARIF"),
        ("audit", {0}, True, "the roots input is ignored: audit reads the lockfile's pins"),
    ],
)
def test_every_input_set_is_no_usage_error(
    runner, locked, tmp_path: Path, command: str, codes: set[int], sarif_written: bool,
    warning: str,
) -> None:
    sarif = tmp_path / f"{command}.sarif"
    inputs = {"command": command, "lockfile": locked["lockfile"], "policy": "default",
              "roots": locked["roots"], "sarif": str(sarif)}
    if command == "audit":  # no built-in policy has an advisories section: give the feed
        inputs.update(policy="", args=f"--advisories\n{locked['feed']}\n")
    result, output = run_step(runner, tmp_path, inputs)
    everything = result.stdout + result.stderr
    assert result.returncode in codes, everything
    assert output == f"exit-code={result.returncode}\n"
    assert "No such option" not in everything and "Usage:" not in everything
    assert f"::warning title=dflash-guard {command}::{warning}" in result.stdout
    assert sarif.is_file() == sarif_written
    if sarif_written:
        assert json.loads(sarif.read_text())["version"] == "2.1.0"


def test_scan_with_roots_and_sarif(runner, builtin_pair, tmp_path: Path) -> None:
    sarif = tmp_path / "scan.sarif"
    inputs = {"command": "scan", "roots": f"{builtin_pair.drafter}\n", "sarif": str(sarif)}
    result, output = run_step(runner, tmp_path, inputs)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert output == f"exit-code={result.returncode}\n"
    assert "::warning" not in result.stdout
    assert json.loads(sarif.read_text())["version"] == "2.1.0"


def test_a_failing_scan_with_sarif_annotates_its_verdict(runner, builtin_pair,
                                                         tmp_path: Path) -> None:
    """docs/ci.md's job (scan + sarif): the report is in the file, and the annotation says why
    the job failed (the verdict line), not "report written to ..."."""
    models = tmp_path / "models" / "drafter"
    shutil.copytree(builtin_pair.drafter, models)
    (models / "dflash.py").write_text("import subprocess\nsubprocess.run(['id'])\n")
    inputs = {"command": "scan", "roots": "models/\n", "sarif": "dflash-guard.sarif"}
    result, output = run_step(runner, tmp_path, inputs)
    assert result.returncode == 1 and output == "exit-code=1\n", result.stderr
    [annotation] = [line for line in result.stdout.splitlines() if line.startswith("::error")]
    assert annotation.startswith("::error title=dflash-guard scan (exit 1)::FAIL: 3 files, ")
    assert "findings (worst: critical" in annotation and "report written" not in annotation
    assert (tmp_path / "dflash-guard.sarif").is_file()
