"""`dflash-guard launch --check ENGINE -- COMMAND`: an existing serve command linted against the
lock and the policy, findings in the scan report shape (text, JSON, SARIF), exit 1. vLLM commands
are resolved by the pinned vLLM's own parser (its venv, `tests/support/vllm.py`), llama.cpp ones
through the table generated from the pinned tree."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from dflash_guard.pins.resolve import build_lock
from tests.support import vllm
from tests.support.launch import COMMIT_D, COMMIT_T, LAUNCH, hub_cache_lock, hub_lock
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


@pytest.fixture
def snap(hf_env: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """The Hub lock with its snapshots in an HF cache, and PINNED naming the verified snapshot
    folders instead of the repo ids (what `launch` prints)."""
    lock, snapshots = hub_cache_lock(hf_env, tmp_path / "snap.lock")
    draft = {**json.loads(DRAFT), "model": str(snapshots["drafter"])}
    del draft["revision"]
    command = [*PINNED[:4], str(snapshots["target"]), "--speculative-config",
               json.dumps(draft), *PINNED[9:]]
    return lock, command


@pytest.fixture(scope="module")
def vllm_python() -> str:
    return str(vllm.install())


@pytest.fixture
def check(cli, vllm_python):
    def run(cli_, lock: Path, policy: Path, command: list[str], *options: str):
        return cli("launch", "--check", "vllm", "--lock", lock, "--policy", policy,
                   "--format", "json", "--program", vllm_python, *options, "--", *command)
    return run


def findings(result) -> list[tuple[str, str]]:
    report = json.loads(result.stdout)
    assert report["passed"] is (result.exit_code == 0)
    return [(f["rule_id"], f["file"]) for f in report["findings"]]


def replaced(command: list[str], flag: str, value: str | None) -> list[str]:
    index = command.index(flag)
    tail = command[index + 2:]
    return command[:index] + ([flag, value] if value is not None else []) + tail


def test_a_pinned_loopback_capped_command_passes(cli, check, snap, policy) -> None:
    lock, command = snap
    result = check(cli, lock, policy, command)
    assert result.exit_code == 0, result.stdout
    assert findings(result) == []


def test_a_hub_repo_id_is_not_the_verified_path(cli, check, snap, tmp_path, policy) -> None:
    """Issue 44 (Q11): the right repo at the locked commit is still read from whatever the HF
    cache holds; only the verified snapshot folder passes, and a file planted there is found."""
    lock, command = snap
    by_id = check(cli, lock, policy, PINNED)
    assert findings(by_id) == [("DG-LAUNCH-NOT-LOCKED", "--model"),
                               ("DG-LAUNCH-NOT-LOCKED", "--speculative-config")]
    assert "Hub repo id" in json.loads(by_id.stdout)["findings"][0]["message"]
    target = Path(command[command.index("--model") + 1])
    (target / "chat_template.jinja").write_text("{{ 'planted' }}")
    planted = check(cli, lock, policy, command)
    assert findings(planted) == [("DG-LAUNCH-NOT-LOCKED", "--model")]
    assert "chat_template.jinja" in json.loads(planted.stdout)["findings"][0]["message"]


def test_main_and_missing_revisions_are_unpinned(cli, check, tmp_path, policy) -> None:
    lock = hub_lock(tmp_path / "hub.lock")
    at_main = check(cli, lock, policy, replaced(PINNED, "--revision", "main"))
    assert at_main.exit_code == 1
    assert ("DG-LAUNCH-UNPINNED", "--revision") in findings(at_main)
    served = ["vllm", "serve", "Qwen/Qwen3-8B", *PINNED[7:]]  # `vllm serve MODEL`, no revision
    assert ("DG-LAUNCH-UNPINNED", "--revision") in findings(check(cli, lock, policy, served))
    other = check(cli, lock, policy, replaced(PINNED, "--revision", "c" * 40))
    assert ("DG-LAUNCH-NOT-LOCKED", "--revision") in findings(other)


def test_a_drafter_that_is_not_the_locked_one(cli, check, tmp_path, policy) -> None:
    lock = hub_lock(tmp_path / "hub.lock")
    for model, revision in (("someone/else", COMMIT_D), ("z-lab/Qwen3-8B-DFlash-b16", "main")):
        config = {**json.loads(DRAFT), "model": model, "revision": revision}
        result = check(cli, lock, policy,
                       replaced(PINNED, "--speculative-config", json.dumps(config)))
        assert result.exit_code == 1
        rules = {rule for rule, _ in findings(result)}
        assert rules & {"DG-LAUNCH-NOT-LOCKED", "DG-LAUNCH-UNPINNED"}


def test_a_public_bind_without_a_key(cli, check, snap, policy) -> None:
    lock, pinned = snap
    public = check(cli, lock, policy, replaced(pinned, "--host", "0.0.0.0"))
    assert findings(public) == [("DG-LAUNCH-EXPOSED", "--host")]
    no_host = check(cli, lock, policy, replaced(pinned, "--host", None))  # vLLM binds 0.0.0.0
    assert findings(no_host) == [("DG-LAUNCH-EXPOSED", "--host")]
    keyed = check(cli, lock, policy, [*replaced(pinned, "--host", "0.0.0.0"), "--api-key", "k"])
    assert keyed.exit_code == 0


def test_caps_and_speculation_unlike_the_policy(cli, check, snap, policy) -> None:
    lock, pinned = snap
    over = check(cli, lock, policy, replaced(pinned, "--max-num-seqs", "256"))
    assert findings(over) == [("DG-LAUNCH-CAPS", "--max-num-seqs")]
    missing = check(cli, lock, policy, replaced(pinned, "--max-model-len", None))
    assert findings(missing) == [("DG-LAUNCH-CAPS", "--max-model-len")]
    draft = json.loads(pinned[pinned.index("--speculative-config") + 1])
    config = {**draft, "method": "eagle3", "num_speculative_tokens": 3}
    unlike = check(cli, lock, policy, replaced(pinned, "--speculative-config", json.dumps(config)))
    assert findings(unlike) == [("DG-LAUNCH-SPECULATIVE", "--speculative-config")] * 2


def test_trust_remote_code_over_unreviewed_code(cli, check, snap, policy) -> None:
    lock, pinned = snap
    result = check(cli, lock, policy, [*pinned, "--trust-remote-code"])
    assert findings(result) == [("DG-LAUNCH-REMOTE-CODE", "--trust-remote-code")]
    assert "dflash.py" in json.loads(result.stdout)["findings"][0]["message"]


def test_local_folders_are_verified(cli, check, padded_pair, padded_lock, policy, tmp_path) -> None:
    target, drafter, lock = padded_pair.target, padded_pair.drafter, padded_lock
    printed = cli("launch", "vllm", "--lock", lock, "--policy", policy, "--root",
                  f"target={target}", "--root", f"drafter={drafter}").stdout
    assert check(cli, lock, policy, shlex.split(printed)).exit_code == 0  # launch's own output
    command = shlex.split(printed)
    command[command.index("--model") + 1] = str(drafter)  # the drafter's folder as the target
    result = check(cli, lock, policy, command)
    assert findings(result) == [("DG-LAUNCH-NOT-LOCKED", "--model")]


def test_sarif_and_text(cli, vllm_python, snap, policy) -> None:
    lock, pinned = snap
    command = [*pinned, "--max-num-seqs", "256"]
    sarif = json.loads(cli("launch", "--check", "vllm", "--lock", lock, "--policy", policy,
                           "--format", "sarif", "--program", vllm_python, "--",
                           *command).stdout)
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["DG-LAUNCH-CAPS"]
    text = cli("launch", "--check", "vllm", "--lock", lock, "--policy", policy, "--program",
               vllm_python, "--", *command)
    assert text.exit_code == 1 and "DG-LAUNCH-CAPS" in text.stdout
    assert "launch check: refused" in text.stdout


def test_llama_cpp_gguf_files_are_checked_by_sha256(cli, check, tmp_path, policy) -> None:
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
    assert findings(result) == [("DG-LAUNCH-NOT-LOCKED", "--spec-draft-model")]
    command[command.index("-md") + 1] = str(tmp_path / "drafter" / "drafter.gguf")
    assert cli("launch", "--check", "llama.cpp", "--lock", lock, "--policy", policy,
               "--", *command).exit_code == 0


def test_launch_options_are_refused_with_check(cli, check, tmp_path, policy) -> None:
    result = cli("launch", "--check", "vllm", "--exec", "--lock", hub_lock(tmp_path / "h.lock"),
                 "--policy", policy, "--", *PINNED)
    assert result.exit_code == 2 and "--exec" in result.stderr


@pytest.mark.parametrize(("extra", "flagged"), [  # P3, as the pinned vLLM's parser reads them
    (["--tokenizer", "/nonexistent/evil-tokenizer"], {"--tokenizer"}),
    (["--speculative-config.model", "/nonexistent/evil-drafter"], {"--speculative-config"}),
    (["--hf-overrides", '{"architectures": ["EvilForCausalLM"]}'], {"--hf-overrides"}),
    (["--tokenizer_mode=mistral", "--tok", "/nonexistent/evil-tokenizer"], "ambiguous"),
])
def test_commands_that_load_something_else_are_found(cli, check, tmp_path, policy, extra,
                                                     flagged) -> None:
    result = check(cli, hub_lock(tmp_path / "hub.lock"), policy, [*PINNED, *extra])
    assert result.exit_code == 1
    if flagged == "ambiguous":  # the parser refuses it: the engine would not start either
        assert "ambiguous option: --tok" in json.loads(result.stdout)["findings"][0]["message"]
        return
    assert {file for _, file in findings(result)} >= flagged


def test_every_resolved_setting_unlike_the_lock_is_a_finding(cli, check, tmp_path,
                                                             policy) -> None:
    """One command re-setting everything the engine loads, through the flag, a config file and
    dotted keys: the pinned vLLM's parser resolves each, and each is a finding."""
    extra = tmp_path / "extra.yaml"
    extra.write_text("trust-remote-code: true\nload-format: dummy\n")
    command = [*replaced(PINNED, "--revision", "c" * 40),
               "--tokenizer", "/nonexistent/evil-tokenizer", "--tokenizer-revision", "d" * 40,
               "--code-revision", "e" * 40, "--hf-overrides", '{"vocab_size": 1}',
               "--chat-template", "/nonexistent/t.jinja", "--download-dir", "/nonexistent/dl",
               "--hf-config-path", "/nonexistent/cfg", "--config", str(extra),
               "--speculative-config.model", "/nonexistent/evil-drafter",
               "--speculative-config.quantization", "fp8"]
    result = check(cli, hub_lock(tmp_path / "hub.lock"), policy, command)
    flagged = {file for _, file in findings(result)}
    assert flagged >= {"--revision", "--tokenizer", "--tokenizer-revision", "--code-revision",
                       "--hf-overrides", "--chat-template", "--download-dir", "--hf-config-path",
                       "--load-format", "--config", "--trust-remote-code",
                       "--speculative-config"}
    messages = " ".join(f["message"] for f in json.loads(result.stdout)["findings"])
    assert "/nonexistent/evil-drafter" in messages and "'quantization'" in messages


def test_vllm_serve_and_a_missing_parser(cli, check, snap, policy) -> None:
    lock, pinned = snap
    served = ["vllm", "serve", pinned[4], *pinned[5:]]
    assert check(cli, lock, policy, served).exit_code == 0
    two = [*pinned[:3], "/nonexistent/evil-model", *pinned[3:]]  # the module ignores a positional
    assert ("DG-LAUNCH-UNLISTED", "--model") in findings(check(cli, lock, policy, two))
    no_vllm = cli("launch", "--check", "vllm", "--lock", lock, "--policy", policy, "--program",
                  sys.executable, "--", *PINNED)
    assert no_vllm.exit_code == 2 and "--program" in no_vllm.stderr
    other = cli("launch", "--check", "vllm", "--lock", lock, "--policy", policy, "--program",
                sys.executable, "--", "bash", "-c", "vllm serve x")
    assert other.exit_code == 2 and "vllm serve" in other.stderr


def _gguf_lock(tmp_path: Path) -> tuple[Path, list[str]]:
    for role in ("target", "drafter"):
        (tmp_path / role).mkdir()
        (tmp_path / role / f"{role}.gguf").write_bytes(b"GGUF" + role.encode())
    lock = write_lock(build_lock({r: str(tmp_path / r) for r in ("target", "drafter")}).lock,
                      tmp_path / "gguf.lock")
    return lock, ["llama-server", "-m", str(tmp_path / "target" / "target.gguf"), "-md",
                  str(tmp_path / "drafter" / "drafter.gguf"), "--spec-type", "draft-dflash",
                  "--spec-draft-n-max", "7", "-c", "512", "-np", "2"]


@pytest.mark.parametrize(("extra", "flagged"), [
    (["--spec-draft-model", "/nonexistent/evil-draft.gguf"], "--spec-draft-model"),  # P3
    (["-mu", "http://example.invalid/evil.gguf"], "--model-url"),  # P3
    (["-hfr", "example.invalid/evil-GGUF"], "--hf-repo"),
    (["-hfrd", "example.invalid/evil-GGUF"], "--spec-draft-hf"),
    (["--lora", "/nonexistent/a.gguf"], "--lora"),
    (["--chat-template-file", "/nonexistent/t.jinja"], "--chat-template-file"),
    (["--override-kv", "x=int:1"], "--override-kv"),
    (["--made-up-flag"], "--made-up-flag"),
])
def test_llama_cpp_commands_that_load_something_else(cli, tmp_path, policy, extra,
                                                     flagged) -> None:
    lock, command = _gguf_lock(tmp_path)
    result = cli("launch", "--check", "llama.cpp", "--lock", lock, "--policy", policy,
                 "--format", "json", "--", *command, *extra)
    assert result.exit_code == 1
    assert flagged in {file for _, file in findings(result)}


def test_check_takes_the_roots(cli, tmp_path, policy) -> None:
    """`--root ROLE=DIR` (issue 36, item 9): the command must load the artifact from there."""
    lock, command = _gguf_lock(tmp_path)
    args = ("launch", "--check", "llama.cpp", "--lock", lock, "--policy", policy, "--root",
            f"target={tmp_path / 'target'}", "--format", "json")
    assert cli(*args, "--", *command).exit_code == 0
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "target.gguf").write_bytes((tmp_path / "target" / "target.gguf").read_bytes())
    command[command.index("-m") + 1] = str(copy / "target.gguf")
    assert findings(cli(*args, "--", *command)) == [("DG-LAUNCH-NOT-LOCKED", "--model")]
