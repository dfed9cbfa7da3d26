"""`dflash-guard launch ENGINE`: the serve command loads exactly what the lock pins, or the
launch is refused (exit 1) with the reason; engine arguments after `--` cannot override it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_guard.pins.resolve import build_lock
from tests.support.hostile import one_line_error
from tests.support.launch import COMMIT_D, LAUNCH, hub_cache_lock, hub_lock
from tests.support.trust import write_lock, write_policy


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = write_policy(tmp_path / "policy")
    path.write_text(path.read_text() + LAUNCH)
    return path


def launch(cli, lock: Path, *args: str):
    return cli("launch", *args[:1], "--lock", lock, *args[1:])


def test_vllm_local_pair_command(cli, padded_pair, padded_lock, policy) -> None:
    target, drafter, lock = padded_pair.target, padded_pair.drafter, padded_lock
    result = launch(cli, lock, "vllm", "--root", f"target={target}", "--root",
                    f"drafter={drafter}", "--policy", policy, "--", "--enforce-eager")
    assert result.exit_code == 0, result.stderr
    argv = shlex.split(result.stdout)
    assert argv[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == str(target.resolve())
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "dflash", "model": str(drafter.resolve()),
                      "num_speculative_tokens": 7}
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert argv[argv.index("--max-model-len") + 1] == "256"
    assert argv[-1] == "--enforce-eager"
    assert "--trust-remote-code" not in argv


def test_a_folder_that_differs_from_the_lock_is_refused(cli, padded_pair, padded_lock, policy,
                                                        tmp_path) -> None:
    target, drafter, lock = padded_pair.target, padded_pair.drafter, padded_lock
    changed = shutil.copytree(target, tmp_path / "changed")
    (changed / "config.json").write_text((target / "config.json").read_text() + " ")
    result = launch(cli, lock, "vllm", "--root", f"target={changed}", "--root",
                    f"drafter={drafter}", "--policy", policy)
    assert result.exit_code == 1 and result.stdout.startswith("refused: ")
    assert "does not match the lock" in result.stdout and "config.json" in result.stdout


def test_hub_artifacts_are_loaded_from_their_verified_snapshots(cli, hf_env, tmp_path,
                                                                policy) -> None:
    """Issue 44 (Q11): a Hub artifact is verified in its HF-cache snapshot and the engine is
    given that folder's path, never the repo id and a revision it would resolve itself; a chat
    template added to the snapshot after the lock is refused before launch."""
    lock, snapshots = hub_cache_lock(hf_env, tmp_path / "hub.lock")
    result = launch(cli, lock, "vllm", "--policy", policy, "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    argv = json.loads(result.stdout)["argv"]
    assert argv[argv.index("--model") + 1] == str(snapshots["target"].resolve())
    assert not {"--revision", "--tokenizer-revision", "--code-revision"} & set(argv)
    assert "Qwen/Qwen3-8B" not in " ".join(argv)
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "dflash", "model": str(snapshots["drafter"].resolve()),
                      "num_speculative_tokens": 7}
    (snapshots["target"] / "chat_template.jinja").write_text("{{ 'planted' }}")
    refused = launch(cli, lock, "vllm", "--policy", policy)
    assert refused.exit_code == 1, refused.stdout + refused.stderr
    assert "chat_template.jinja: extra" in refused.stdout, refused.stdout
    (snapshots["target"] / "chat_template.jinja").unlink()
    shutil.rmtree(snapshots["drafter"])
    missing = launch(cli, lock, "vllm", "--policy", policy)
    assert "not in the HF cache" in one_line_error(missing)


def test_a_refusal_is_a_json_document(cli, padded_pair, padded_lock, policy) -> None:
    """`--format json` writes a document for a refusal too (issue 34: a LaunchReport)."""
    result = launch(cli, padded_lock, "vllm", "--baseline", "--root",
                    f"target={padded_pair.target}", "--policy", policy, "--host", "0.0.0.0",
                    "--format", "json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1
    assert report["passed"] is False and report["verdict"] == "refused"
    assert "--api-key-env" in report["reason"] and "argv" not in report
    passed = json.loads(launch(cli, padded_lock, "vllm", "--baseline", "--root",
                               f"target={padded_pair.target}", "--policy", policy,
                               "--format", "json").stdout)
    assert passed["passed"] is True and passed["verdict"] == "passed" and passed["argv"]


def test_a_local_artifact_needs_its_folder(cli, padded_lock, policy) -> None:
    message = one_line_error(launch(cli, padded_lock, "vllm", "--policy", policy))
    assert "--root target=DIR" in message


def test_a_public_bind_needs_a_key_from_a_variable(cli, padded_pair, padded_lock, policy,
                                                   monkeypatch) -> None:
    target, lock = padded_pair.target, padded_lock
    args = ("vllm", "--baseline", "--root", f"target={target}", "--policy", policy,
            "--host", "0.0.0.0")
    refused = launch(cli, lock, *args)
    assert refused.exit_code == 1 and "--api-key-env" in refused.stdout
    unset = launch(cli, lock, *args, "--api-key-env", "ENGINE_KEY")
    assert unset.exit_code == 1 and "unset or empty" in unset.stdout
    monkeypatch.setenv("ENGINE_KEY", "s3cret-value")
    result = launch(cli, lock, *args, "--api-key-env", "ENGINE_KEY")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith('VLLM_API_KEY="${ENGINE_KEY}" ')
    assert "s3cret-value" not in result.stdout
    assert "--speculative-config" not in result.stdout  # --baseline: the target alone


def test_trust_remote_code_only_over_reviewed_code(cli, padded_pair, padded_lock, policy) -> None:
    target, drafter, lock = padded_pair.target, padded_pair.drafter, padded_lock
    args = ("vllm", "--root", f"target={target}", "--root", f"drafter={drafter}",
            "--trust-remote-code")
    refused = launch(cli, lock, *args, "--policy", "default", "--num-speculative-tokens", "7")
    assert refused.exit_code == 1
    assert "drafter/dflash.py" in refused.stdout and "reviewed_code" in refused.stdout
    allowed = launch(cli, lock, *args, "--policy", policy)  # write_policy reviews dflash.py
    assert allowed.exit_code == 0, allowed.stderr
    assert "--trust-remote-code" in shlex.split(allowed.stdout)


def test_engine_arguments_cannot_override_what_launch_sets(cli, padded_pair, padded_lock,
                                                           policy) -> None:
    target, drafter, lock = padded_pair.target, padded_pair.drafter, padded_lock
    for extra in (["--revision", "main"], ["--trust-remote-code"], ["--host=0.0.0.0"],
                  ["--max-num-seqs", "512"]):
        message = one_line_error(launch(cli, lock, "vllm", "--root", f"target={target}",
                                        "--root", f"drafter={drafter}", "--policy", policy,
                                        "--", *extra))
        assert "launch sets it" in message


def test_the_policy_sets_the_token_count(cli, padded_pair, padded_lock, policy) -> None:
    target, drafter, lock = padded_pair.target, padded_pair.drafter, padded_lock
    args = ("vllm", "--root", f"target={target}", "--root", f"drafter={drafter}")
    other = launch(cli, lock, *args, "--policy", policy, "--num-speculative-tokens", "3")
    assert other.exit_code == 1 and "sets 7" in other.stdout


def test_without_a_token_count_the_drafters_block_size_is_taken(cli, padded_pair, padded_lock,
                                                                 hf_env, tmp_path) -> None:
    """As llama.cpp clamps to it: the block size less the anchor token (issue 36, item 9)."""
    target, drafter, lock = padded_pair.target, padded_pair.drafter, padded_lock
    block = json.loads((drafter / "config.json").read_text())["block_size"]
    result = launch(cli, lock, "vllm", "--root", f"target={target}", "--root",
                    f"drafter={drafter}", "--policy", "dev", "--format", "json")
    assert result.exit_code == 0, result.stdout
    argv = json.loads(result.stdout)["argv"]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["num_speculative_tokens"] == block - 1
    hub_lock_path, _ = hub_cache_lock(hf_env, tmp_path / "hub.lock")
    hub = launch(cli, hub_lock_path, "vllm", "--policy", "dev", "--format", "json")
    assert hub.exit_code == 0, hub.stdout + hub.stderr  # read from the verified snapshot
    argv = json.loads(hub.stdout)["argv"]
    assert json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"] == 15


def test_llama_cpp_loads_the_locked_gguf_files(cli, tmp_path, policy) -> None:
    for role in ("target", "drafter"):
        (tmp_path / role).mkdir()
        (tmp_path / role / f"{role}.gguf").write_bytes(b"GGUF" + role.encode())
    lock = write_lock(build_lock({r: str(tmp_path / r) for r in ("target", "drafter")}).lock,
                      tmp_path / "gguf.lock")
    roots = ("--root", f"target={tmp_path / 'target'}", "--root", f"drafter={tmp_path / 'drafter'}")
    result = launch(cli, lock, "llama.cpp", *roots, "--policy", policy)
    assert result.exit_code == 1  # the default policy wants the served target GGUF compared
    assert "target/target.gguf: llama.cpp serves it as --model" in result.stdout
    policy.write_text(policy.read_text().replace("gguf_requires_comparison: true",
                                                 "gguf_requires_comparison: false"))
    result = launch(cli, lock, "llama.cpp", *roots, "--policy", policy)
    assert result.exit_code == 0, result.stderr
    argv = shlex.split(result.stdout)
    assert argv[0] == "llama-server"
    assert argv[argv.index("--model") + 1] == str((tmp_path / "target" / "target.gguf").resolve())
    assert argv[argv.index("--model-draft") + 1].endswith("drafter.gguf")
    assert argv[argv.index("--spec-type") + 1] == "draft-dflash"
    assert argv[argv.index("--ctx-size") + 1] == "512"
    (tmp_path / "drafter" / "drafter.gguf").write_bytes(b"GGUF" + b"other!!")
    refused = launch(cli, lock, "llama.cpp", *roots, "--policy", policy)
    assert refused.exit_code == 1 and "drafter.gguf" in refused.stdout


def test_sglang_command(cli, hf_env, tmp_path, policy) -> None:
    lock, snapshots = hub_cache_lock(hf_env, tmp_path / "hub.lock")
    result = launch(cli, lock, "sglang", "--policy", policy)
    assert result.exit_code == 0, result.stderr
    argv = shlex.split(result.stdout)
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "DFLASH"
    assert argv[argv.index("--model-path") + 1] == str(snapshots["target"].resolve())
    assert (argv[argv.index("--speculative-draft-model-path") + 1]
            == str(snapshots["drafter"].resolve()))
    assert "--revision" not in argv and "--speculative-draft-model-revision" not in argv


@pytest.mark.parametrize("section", [
    "launch:\n  vllm: {max_num_seqs: -1}\n",
    "launch:\n  vllm: {trust_remote_code: 1}\n",
    "launch:\n  num_speculative_tokens: zero\n",
])
def test_a_bad_launch_section_is_an_input_error(cli, tmp_path, section) -> None:
    path = write_policy(tmp_path / "policy")
    path.write_text(path.read_text() + section)
    assert "launch" in one_line_error(cli("policy", "check", path))


def test_an_unknown_engine_is_an_input_error(cli, padded_lock) -> None:
    assert "vllm, llama.cpp, sglang" in one_line_error(launch(cli, padded_lock, "tgi"))


def test_exec_runs_the_command_with_the_key_in_the_engine_variable(padded_pair, padded_lock, policy,
                                                                   tmp_path) -> None:
    target, lock = padded_pair.target, padded_lock
    program = tmp_path / "engine.sh"
    program.write_text('#!/bin/sh\necho "argv: $*"\necho "key: $VLLM_API_KEY"\n')
    program.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "dflash_guard", "launch", "vllm", "--lock", str(lock),
         "--policy", str(policy), "--root", f"target={target}", "--baseline", "--host",
         "0.0.0.0", "--api-key-env", "ENGINE_KEY", "--program", str(program), "--exec"],
        capture_output=True, text=True, check=False, timeout=120,
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, "ENGINE_KEY": "k-123"})
    assert done.returncode == 0, done.stderr
    argv_line, key_line = done.stdout.splitlines()
    assert argv_line.startswith("argv: -m vllm.entrypoints.openai.api_server --model ")
    assert "--host 0.0.0.0" in argv_line and "k-123" not in argv_line
    assert key_line == "key: k-123"


def test_an_unsigned_hub_confirmed_claim_earns_no_org_tier_at_launch(tmp_path):
    """Attack note of 2026-12-02: launch checks no lockfile signature, so `hub-confirmed` in the
    lock is text anyone can write; the org's tier (here one allowing remote code) must not apply,
    as the gate would not apply it to an unsigned lock."""
    import dataclasses

    from dflash_guard.launch.plan import remote_code_problems
    from dflash_guard.pins.lockfile import HUB_CONFIRMED, load_lockfile
    from dflash_guard.trust.policy import load_policy

    lock = load_lockfile(hub_lock(tmp_path / "hub.lock"))
    claimed = dataclasses.replace(lock, artifacts=tuple(
        dataclasses.replace(a, provenance=HUB_CONFIRMED) for a in lock.artifacts))
    policy = write_policy(tmp_path / "p", ("local_tier: official", "local_tier: unknown"),
                          ("    remote_code: reviewed-only\n    pickle_allowed: false\n"
                           "    staging_required: false\n",
                           "    remote_code: allow\n    pickle_allowed: false\n"
                           "    staging_required: false\n"))
    problems = remote_code_problems(claimed, load_policy(str(policy)), ["drafter"])
    assert problems == ["the policy denies remote code for the unknown tier (drafter "
                        f"z-lab/Qwen3-8B-DFlash-b16@{COMMIT_D[:12]})"], problems
