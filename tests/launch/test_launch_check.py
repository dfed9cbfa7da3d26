"""`dflash-guard launch --check ENGINE -- COMMAND`: an existing serve command linted against the
lock and the policy, findings in the scan report shape (text, JSON, SARIF), exit 1."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from dflash_guard.pins.resolve import build_lock
from tests.support.launch import COMMIT_D, COMMIT_T, LAUNCH, hub_lock
from tests.support.trust import write_lock, write_policy

DRAFT = json.dumps({"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16",
                    "revision": COMMIT_D, "num_speculative_tokens": 7})
PINNED = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "Qwen/Qwen3-8B",
          "--revision", COMMIT_T, "--speculative-config", DRAFT, "--host", "127.0.0.1",
          "--max-num-seqs", "8", "--max-model-len", "256"]


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = write_policy(tmp_path / "policy")
    # The lock's Hub artifacts are unconfirmed snapshots; this policy trusts those as its own.
    text = path.read_text().replace("cache_tier: unknown", "cache_tier: official")
    path.write_text(text + LAUNCH.replace("  num_speculative_tokens: 7\n",
                                                      "  speculative_method: dflash\n"
                                                      "  num_speculative_tokens: 7\n"))
    return path


def check(cli, lock: Path, policy: Path, command: list[str], *options: str):
    return cli("launch", "--check", "vllm", "--lock", lock, "--policy", policy,
               "--format", "json", *options, "--", *command)


def findings(result) -> list[tuple[str, str]]:
    report = json.loads(result.stdout)
    assert report["passed"] is (result.exit_code == 0)
    return [(f["rule_id"], f["file"]) for f in report["findings"]]


def replaced(command: list[str], flag: str, value: str | None) -> list[str]:
    index = command.index(flag)
    tail = command[index + 2:]
    return command[:index] + ([flag, value] if value is not None else []) + tail


def test_a_pinned_loopback_capped_command_passes(cli, tmp_path, policy) -> None:
    result = check(cli, hub_lock(tmp_path / "hub.lock"), policy, PINNED)
    assert result.exit_code == 0, result.stdout
    assert findings(result) == []


def test_main_and_missing_revisions_are_unpinned(cli, tmp_path, policy) -> None:
    lock = hub_lock(tmp_path / "hub.lock")
    at_main = check(cli, lock, policy, replaced(PINNED, "--revision", "main"))
    assert at_main.exit_code == 1
    assert findings(at_main) == [("DG-LAUNCH-UNPINNED", "--revision")]
    served = ["vllm", "serve", "Qwen/Qwen3-8B", *PINNED[7:]]  # `vllm serve MODEL`, no revision
    assert ("DG-LAUNCH-UNPINNED", "--revision") in findings(check(cli, lock, policy, served))
    other = check(cli, lock, policy, replaced(PINNED, "--revision", "c" * 40))
    assert findings(other) == [("DG-LAUNCH-NOT-LOCKED", "--revision")]


def test_a_drafter_that_is_not_the_locked_one(cli, tmp_path, policy) -> None:
    lock = hub_lock(tmp_path / "hub.lock")
    for model, revision in (("someone/else", COMMIT_D), ("z-lab/Qwen3-8B-DFlash-b16", "main")):
        config = {**json.loads(DRAFT), "model": model, "revision": revision}
        result = check(cli, lock, policy,
                       replaced(PINNED, "--speculative-config", json.dumps(config)))
        assert result.exit_code == 1
        rules = {rule for rule, _ in findings(result)}
        assert rules & {"DG-LAUNCH-NOT-LOCKED", "DG-LAUNCH-UNPINNED"}


def test_a_public_bind_without_a_key(cli, tmp_path, policy) -> None:
    lock = hub_lock(tmp_path / "hub.lock")
    public = check(cli, lock, policy, replaced(PINNED, "--host", "0.0.0.0"))
    assert findings(public) == [("DG-LAUNCH-EXPOSED", "--host")]
    no_host = check(cli, lock, policy, replaced(PINNED, "--host", None))  # vLLM binds 0.0.0.0
    assert findings(no_host) == [("DG-LAUNCH-EXPOSED", "--host")]
    keyed = check(cli, lock, policy, [*replaced(PINNED, "--host", "0.0.0.0"), "--api-key", "k"])
    assert keyed.exit_code == 0


def test_caps_and_speculation_unlike_the_policy(cli, tmp_path, policy) -> None:
    lock = hub_lock(tmp_path / "hub.lock")
    over = check(cli, lock, policy, replaced(PINNED, "--max-num-seqs", "256"))
    assert findings(over) == [("DG-LAUNCH-CAPS", "--max-num-seqs")]
    missing = check(cli, lock, policy, replaced(PINNED, "--max-model-len", None))
    assert findings(missing) == [("DG-LAUNCH-CAPS", "--max-model-len")]
    config = {**json.loads(DRAFT), "method": "eagle3", "num_speculative_tokens": 3}
    unlike = check(cli, lock, policy, replaced(PINNED, "--speculative-config", json.dumps(config)))
    assert findings(unlike) == [("DG-LAUNCH-SPECULATIVE", "--speculative-config")] * 2


def test_trust_remote_code_over_unreviewed_code(cli, tmp_path, policy) -> None:
    result = check(cli, hub_lock(tmp_path / "hub.lock"), policy, [*PINNED, "--trust-remote-code"])
    assert findings(result) == [("DG-LAUNCH-REMOTE-CODE", "--trust-remote-code")]
    assert "dflash.py" in json.loads(result.stdout)["findings"][0]["message"]


def test_local_folders_are_verified(cli, padded_pair, padded_lock, policy, tmp_path) -> None:
    target, drafter, lock = padded_pair.target, padded_pair.drafter, padded_lock
    printed = cli("launch", "vllm", "--lock", lock, "--policy", policy, "--root",
                  f"target={target}", "--root", f"drafter={drafter}").stdout
    assert check(cli, lock, policy, shlex.split(printed)).exit_code == 0  # launch's own output
    command = shlex.split(printed)
    command[command.index("--model") + 1] = str(drafter)  # the drafter's folder as the target
    result = check(cli, lock, policy, command)
    assert findings(result) == [("DG-LAUNCH-NOT-LOCKED", "--model")]


def test_sarif_and_text(cli, tmp_path, policy) -> None:
    lock = hub_lock(tmp_path / "hub.lock")
    command = replaced(PINNED, "--revision", "main")
    sarif = json.loads(cli("launch", "--check", "vllm", "--lock", lock, "--policy", policy,
                           "--format", "sarif", "--", *command).stdout)
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["DG-LAUNCH-UNPINNED"]
    text = cli("launch", "--check", "vllm", "--lock", lock, "--policy", policy, "--", *command)
    assert text.exit_code == 1 and "DG-LAUNCH-UNPINNED" in text.stdout
    assert "launch check: refused" in text.stdout


def test_llama_cpp_gguf_files_are_checked_by_sha256(cli, tmp_path, policy) -> None:
    for role in ("target", "drafter"):
        (tmp_path / role).mkdir()
        (tmp_path / role / f"{role}.gguf").write_bytes(b"GGUF" + role.encode())
    lock = write_lock(build_lock({r: str(tmp_path / r) for r in ("target", "drafter")}).lock,
                      tmp_path / "gguf.lock")
    stray = tmp_path / "stray.gguf"
    stray.write_bytes(b"GGUF other")
    command = ["llama-server", "-m", str(tmp_path / "target" / "target.gguf"), "-md", str(stray),
               "--spec-type", "draft-dflash", "--spec-draft-n-max", "7", "-c", "512", "-np", "2"]
    result = cli("launch", "--check", "llama.cpp", "--lock", lock, "--policy", policy,
                 "--format", "json", "--", *command)
    assert findings(result) == [("DG-LAUNCH-NOT-LOCKED", "--model-draft")]
    command[command.index("-md") + 1] = str(tmp_path / "drafter" / "drafter.gguf")
    assert cli("launch", "--check", "llama.cpp", "--lock", lock, "--policy", policy,
               "--", *command).exit_code == 0


def test_launch_options_are_refused_with_check(cli, tmp_path, policy) -> None:
    result = cli("launch", "--check", "vllm", "--exec", "--lock", hub_lock(tmp_path / "h.lock"),
                 "--policy", policy, "--", *PINNED)
    assert result.exit_code == 2 and "--exec" in result.stderr
