"""Progress of long work on stderr: plain lines when stderr is not a terminal (as here), nothing
with `--quiet`, never on stdout (the built-in pair)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dflash_guard.formats.progress import size_text
from dflash_guard.gate import STEPS
from tests.support.fixtures import ModelPair

ENGINE = "vllm=https://github.com/vllm-project/vllm@a1b2c3d4e5f60718293a4b5c6d7e8f9012345678#v0.11"


def locked(cli, pair: ModelPair, folder: Path) -> Path:
    target, drafter = pair.target, pair.drafter
    lock = folder / "dflash.lock"
    result = cli("lock", "--target", target, "--drafter", drafter, "--engine", ENGINE,
                 "-o", lock, "--quiet")
    assert result.exit_code == 0, result.stderr
    return lock


def roots(pair: ModelPair) -> list[str]:
    return ["--root", f"target={pair.target}", "--root", f"drafter={pair.drafter}"]


def command(cli, pair: ModelPair, tmp_path: Path, name: str) -> list:
    """A quick command that does long work on a big deploy (every file hashed or scanned)."""
    target, drafter = pair.target, pair.drafter
    if name == "lock":
        return ["lock", "--target", target, "--drafter", drafter, "-o", tmp_path / "dflash.lock"]
    if name == "verify":
        return ["verify", "--lock", locked(cli, pair, tmp_path), *roots(pair), "--no-cache"]
    if name == "launch":
        return ["launch", "vllm", "--lock", locked(cli, pair, tmp_path), *roots(pair),
                "--num-speculative-tokens", "4"]
    return ["scan", drafter, "--target", target]


@pytest.mark.parametrize("name", ["lock", "verify", "scan", "launch"])
def test_quiet_leaves_stderr_empty_and_stdout_as_it_was(cli, builtin_pair, tmp_path, name,
                                                        monkeypatch):
    args = command(cli, builtin_pair, tmp_path, name)
    runs = []
    for flags in ([], ["--quiet"]):  # each with its own stat cache: both hash every file
        monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / f"cache{len(runs)}"))
        runs.append(cli(*args, *flags))
    shown, quiet = runs
    assert shown.exit_code == quiet.exit_code == 0, shown.stderr
    assert shown.stderr and quiet.stderr == ""
    assert quiet.stdout == shown.stdout


def test_hashing_reports_files_and_bytes(cli, builtin_pair, tmp_path):
    target, drafter = builtin_pair.target, builtin_pair.drafter
    result = cli("verify", "--lock", locked(cli, builtin_pair, tmp_path), *roots(builtin_pair),
                 "--no-cache", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["passed"]
    for role, folder in (("target", target), ("drafter", drafter)):
        files = [f for f in folder.iterdir() if f.is_file()]
        size = size_text(sum(f.stat().st_size for f in files))
        assert f"hashing {role}: {size}/{size}, {len(files)}/{len(files)} files (" \
            in result.stderr


def test_launch_reports_the_hashing_of_what_it_verifies(cli, builtin_pair, tmp_path,
                                                        monkeypatch):
    """Verifying a local folder before a launch, and the file a `--check`ed command names, hash
    what the stat cache does not know: a large model's minutes, shown."""
    lock = locked(cli, builtin_pair, tmp_path)
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "empty-cache"))
    result = cli("launch", "vllm", "--lock", lock, *roots(builtin_pair),
                 "--num-speculative-tokens", "4")
    assert result.exit_code == 0, result.stderr
    assert "hashing target: " in result.stderr and "hashing drafter: " in result.stderr
    assert "hashing" not in result.stdout
    weights = builtin_pair.drafter / "model.safetensors"
    checked = cli("launch", "--check", "llama.cpp", "--lock", lock, "--format", "json", "--",
                  "llama-server", "-m", builtin_pair.target, "-md", weights)
    size = size_text(weights.stat().st_size)
    assert f"hashing drafter: {size}/{size}, 1/1 files (" in checked.stderr
    assert "findings" in json.loads(checked.stdout)  # the report alone on stdout


def test_scan_reports_files(cli, builtin_pair):
    drafter = builtin_pair.drafter
    result = cli("scan", drafter, "--format", "json")
    files = len([f for f in drafter.iterdir() if f.is_file()])
    assert f"scanning {drafter}: {files}/{files} files (" in result.stderr
    assert json.loads(result.stdout)["summary"]


def test_the_gate_names_each_check_as_it_runs(cli, builtin_pair, tmp_path):
    lock = locked(cli, builtin_pair, tmp_path)
    policy = tmp_path / "dev-pinned.yaml"  # the engine's release is the policy's evidence
    url, commit = ENGINE.split("=", 1)[1].split("#")[0].rsplit("@", 1)
    policy.write_text(f"extends: dev\nname: dev-pinned\nengines:\n  repositories:\n"
                      f"    - upstream: {url}\n      releases: {{v0.11.0: {commit}}}\n")
    result = cli("gate", "--lock", lock, "--policy", policy, *roots(builtin_pair),
                 "--format", "json")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    checks = len(STEPS)
    assert lines[0] == "gate ..." and lines[-1].startswith(f"gate: {checks}/{checks} checks ("), \
        result.stderr
    started = [line[2:-4] for line in lines if re.fullmatch(r"  \S.* \.\.\.", line)]
    assert started == list(STEPS), result.stderr
    # the difftest check holds the decoding, with the prompts, tokens and tau so far
    # the last decoding line (a slow machine also prints lines as the prompts go)
    decoded = [line for line in lines if line.startswith("    decoding: ")][-1]
    assert re.match(r"    decoding: 12/12 prompts, \d+ tokens, tau \d\.\d\d \(", decoded), \
        result.stderr
    report = json.loads(result.stdout)  # stdout is the report alone
    difftest = next(c for c in report["checks"] if c["name"] == "difftest")
    assert f"tau {decoded.split('tau ')[1][:4]} " in difftest["reason"]


def test_difftest_reports_prompts_tokens_and_tau(cli, builtin_pair):
    target, drafter = builtin_pair.target, builtin_pair.drafter
    result = cli("difftest", "local", "--target", target, "--drafter", drafter,
                 "--max-new-tokens", "4", "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    prompts = report["prompts"]
    tokens = sum(len(p["output_ids"]) for p in prompts)
    tau = report["overall"]["tau_mean"]
    assert (f"\ndecoding: {len(prompts)}/{len(prompts)} prompts, {tokens} tokens, "
            f"tau {tau:.2f} (") in result.stderr
    assert f"loading {target} and {drafter} ..." in result.stderr
