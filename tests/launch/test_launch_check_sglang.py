"""`dflash-guard launch --check sglang -- COMMAND`: an SGLang serve command resolved by the
pinned SGLang's own parser (`sglang` 0.5.23 beside the vLLM venv, tests/support/sglang.py),
then checked against the lock and the policy: the locked folders for the model, the tokenizer
and the drafter, `--trust-remote-code` only over reviewed code, the page's caps
(`--mem-fraction-static`, `--max-running-requests`, `--cuda-graph-max-bs-decode`). Issue 48."""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from pathlib import Path

import pytest

from dflash_guard.launch import passthrough, sglang_parser
from dflash_guard.lossless.endpoint.metrics import SGLANG_ACCEPT_LENGTH, SGLANG_ACCEPT_RATE
from tests.support import sglang
from tests.support.doc_blocks import clone_root, run_block
from tests.support.hostile import one_line_error
from tests.support.launch import COMMIT_T, DRAFTER_FILES, hub_cache_lock
from tests.support.trust import REPO, write_policy

CAPS = {"--max-running-requests": ("8", "64"), "--mem-fraction-static": ("0.8", "0.95"),
        "--cuda-graph-max-bs-decode": ("16", "256")}
LAUNCH = ("launch:\n  speculative_method: dflash\n  num_speculative_tokens: 7\n"
          "  sglang: {max_running_requests: 8, mem_fraction_static: 0.8, "
          "cuda_graph_max_bs_decode: 16}\n")


def _policy(folder: Path, reviewed: tuple[str, ...] = ()) -> Path:
    path = write_policy(folder, reviewed=reviewed)
    # The lock's Hub artifacts are unconfirmed snapshots; this policy trusts those as its own.
    path.write_text(path.read_text().replace("cache_tier: unknown", "cache_tier: official")
                    + LAUNCH)
    return path


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    return _policy(tmp_path / "policy")


@pytest.fixture(scope="module")
def sglang_python() -> str:
    return str(sglang.install())


@pytest.fixture
def locked(cli, hf_env: Path, tmp_path: Path, policy: Path) -> tuple[Path, list[str], dict]:
    """The Hub lock with its snapshots in an HF cache, and the command `launch sglang` prints
    for it (the verified snapshot folders, the policy's caps)."""
    lock, snapshots = hub_cache_lock(hf_env, tmp_path / "snap.lock")
    printed = cli("launch", "sglang", "--lock", lock, "--policy", policy)
    assert printed.exit_code == 0, printed.stderr
    return lock, shlex.split(printed.stdout), snapshots


@pytest.fixture
def check(cli, sglang_python):
    def run(lock: Path, policy: Path, command: list[str], *options: str):
        return cli("launch", "--check", "sglang", "--lock", lock, "--policy", policy,
                   "--format", "json", "--program", sglang_python, *options, "--", *command)
    return run


def findings(result) -> list[tuple[str, str]]:
    report = json.loads(result.stdout)
    assert report["passed"] is (result.exit_code == 0)
    return [(f["rule_id"], f["file"]) for f in report["findings"]]


def messages(result) -> str:
    return " ".join(f["message"] for f in json.loads(result.stdout)["findings"])


def replaced(command: list[str], flag: str, value: str | None) -> list[str]:
    index = command.index(flag)
    return command[:index] + ([flag, value] if value is not None else []) + command[index + 2:]


def test_the_command_launch_prints_passes(check, locked, policy) -> None:
    """The round trip the issue asks for: `launch sglang`'s own output, through SGLang's parser
    (`python -m sglang.launch_server` is the program, not a flag `--m`), and `sglang serve`."""
    lock, command, snapshots = locked
    assert command[:3] == ["python3", "-m", "sglang.launch_server"]
    assert command[command.index("--speculative-num-draft-tokens") + 1] == "8"  # 7 + the root
    for flag, (cap, _) in CAPS.items():
        assert command[command.index(flag) + 1] == cap
    result = check(lock, policy, command)
    assert result.exit_code == 0, result.stdout
    assert findings(result) == []
    served = ["sglang", "serve", str(snapshots["target"]), *command[5:]]  # a positional model
    assert check(lock, policy, served).exit_code == 0
    typed = ["/usr/bin/sglang", "serve", "--model-type", "llm", *command[3:]]
    assert check(lock, policy, typed).exit_code == 0


def test_an_unlocked_model_is_refused(check, locked, policy, tmp_path) -> None:
    lock, command, snapshots = locked
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "llama"}')
    for model in (str(other), str(snapshots["drafter"])):
        result = check(lock, policy, replaced(command, "--model-path", model))
        assert result.exit_code == 1
        assert findings(result) == [("DG-LAUNCH-NOT-LOCKED", "--model-path")], model
    by_id = replaced(command, "--model-path", "Qwen/Qwen3-8B")  # SGLang resolves it itself
    assert findings(check(lock, policy, by_id)) == [("DG-LAUNCH-UNPINNED", "--revision")]
    at_commit = check(lock, policy, [*by_id, "--revision", COMMIT_T])
    assert findings(at_commit) == [("DG-LAUNCH-NOT-LOCKED", "--model-path")]
    assert "Hub repo id" in messages(at_commit)
    served = ["sglang", "serve", str(other), *command[5:]]
    assert findings(check(lock, policy, served)) == [("DG-LAUNCH-NOT-LOCKED", "--model-path")]


def test_an_unlocked_tokenizer_is_refused(check, locked, policy, tmp_path) -> None:
    """A tokenizer (and its chat template) is locked with the target: another folder is
    refused, the verified target folder passes; a config file that sets it is found too."""
    lock, command, snapshots = locked
    evil = tmp_path / "evil-tokenizer"
    evil.mkdir()
    (evil / "tokenizer_config.json").write_text('{"chat_template": "{{ planted }}"}')
    result = check(lock, policy, [*command, "--tokenizer-path", str(evil)])
    assert findings(result) == [("DG-LAUNCH-NOT-LOCKED", "--tokenizer-path")]
    same = check(lock, policy, [*command, "--tokenizer-path", str(snapshots["target"])])
    assert same.exit_code == 0, same.stdout
    config = tmp_path / "extra.yaml"
    config.write_text(f"tokenizer-path: {evil}\n")
    through_config = check(lock, policy, [*command, "--config", str(config)])
    assert set(findings(through_config)) == {("DG-LAUNCH-NOT-LOCKED", "--tokenizer-path"),
                                             ("DG-LAUNCH-UNLISTED", "--config")}
    abbreviated = check(lock, policy, [*command, "--tokenizer-p", str(evil)])  # argparse's
    assert findings(abbreviated) == [("DG-LAUNCH-NOT-LOCKED", "--tokenizer-path")]


def test_an_unlocked_drafter_is_refused(check, locked, policy, tmp_path) -> None:
    lock, command, snapshots = locked
    result = check(lock, policy, replaced(command, "--speculative-draft-model-path",
                                          str(snapshots["target"])))
    assert findings(result) == [("DG-LAUNCH-NOT-LOCKED", "--speculative-draft-model-path")]


def test_trust_remote_code_only_over_reviewed_code(check, locked, tmp_path) -> None:
    lock, command, _ = locked
    unreviewed = check(lock, _policy(tmp_path / "p1"), [*command, "--trust-remote-code"])
    assert unreviewed.exit_code == 1
    assert findings(unreviewed) == [("DG-LAUNCH-REMOTE-CODE", "--trust-remote-code")]
    assert "dflash.py" in messages(unreviewed)
    code = hashlib.sha256(DRAFTER_FILES["dflash.py"]).hexdigest()
    reviewed = check(lock, _policy(tmp_path / "p2", reviewed=(code,)),
                     [*command, "--trust-remote-code"])
    assert reviewed.exit_code == 0, reviewed.stdout


@pytest.mark.parametrize("flag", sorted(CAPS))
def test_each_cap_exceeded_or_missing_is_refused(check, locked, policy, flag) -> None:
    lock, command, _ = locked
    over = check(lock, policy, replaced(command, flag, CAPS[flag][1]))
    assert findings(over) == [("DG-LAUNCH-CAPS", flag)]
    assert f"{flag} {CAPS[flag][1]} is over the policy's cap of {CAPS[flag][0]}" in messages(over)
    missing = check(lock, policy, replaced(command, flag, None))
    assert findings(missing) == [("DG-LAUNCH-CAPS", flag)]
    assert "is not set" in messages(missing)


def test_the_parser_resolves_what_a_flag_table_would_miss(check, locked, policy) -> None:
    """An abbreviation and the `=` form reach the same setting through SGLang's own parser;
    an option SGLang does not have is its parser's refusal."""
    lock, command, _ = locked
    abbreviated = check(lock, policy, [*replaced(command, "--mem-fraction-static", None),
                                       "--mem-frac=0.95"])
    assert findings(abbreviated) == [("DG-LAUNCH-CAPS", "--mem-fraction-static")]
    unknown = check(lock, policy, [*command, "--made-up-flag"])
    assert unknown.exit_code == 1
    assert "SGLang's own parser refuses the command: unrecognized arguments: --made-up-flag" \
        in messages(unknown)
    loaders = check(lock, policy, [*command, "--load-format", "dummy",
                                   "--json-model-override-args", '{"vocab_size": 1}'])
    assert {file for _, file in findings(loaders)} == {"--load-format",
                                                        "--json-model-override-args"}


def test_speculation_unlike_the_policy(check, locked, policy) -> None:
    lock, command, _ = locked
    seven = check(lock, policy, replaced(command, "--speculative-num-draft-tokens", "7"))
    assert findings(seven) == [("DG-LAUNCH-SPECULATIVE", "--speculative-draft-model-path")]
    assert "the policy's tokens plus one: 8" in messages(seven)
    eagle = check(lock, policy, replaced(command, "--speculative-algorithm", "EAGLE"))
    assert findings(eagle) == [("DG-LAUNCH-SPECULATIVE", "--speculative-draft-model-path")]


def test_a_public_bind_without_a_key(check, locked, policy) -> None:
    lock, command, _ = locked
    public = check(lock, policy, replaced(command, "--host", "0.0.0.0"))
    assert findings(public) == [("DG-LAUNCH-EXPOSED", "--host")]
    keyed = check(lock, policy, [*replaced(command, "--host", "0.0.0.0"), "--api-key", "k"])
    assert keyed.exit_code == 0, keyed.stdout


def test_exit_codes_and_usage_errors(cli, check, locked, policy, sglang_python) -> None:
    lock, command, _ = locked
    assert check(lock, policy, command).exit_code == 0
    assert check(lock, policy, [*command, "--max-running-requests", "64"]).exit_code == 1
    other = cli("launch", "--check", "sglang", "--lock", lock, "--policy", policy, "--program",
                sglang_python, "--", "bash", "-c", "sglang serve x")
    assert "sglang.launch_server" in one_line_error(other)
    no_sglang = cli("launch", "--check", "sglang", "--lock", lock, "--policy", policy,
                    "--program", sys.executable, "--", *command)
    assert "--program" in one_line_error(no_sglang)
    diffusion = check(lock, policy, ["sglang", "serve", "--model-type", "diffusion",
                                     *command[3:]])
    assert ("DG-LAUNCH-UNLISTED", "--model-type") in findings(diffusion)


def test_the_pass_through_list_is_sglangs(sglang_python) -> None:
    """Every spelling `launch sglang -- ...` passes is an option of the pinned SGLang, taking
    as many values as the list says, and every setting the check compares is one of its own."""
    resolved = sglang_parser.resolve(sglang_python, ["--model-path", "/nonexistent/m"])
    assert resolved.error is None
    for spelling, values in passthrough.SGLANG_FLAGS.items():
        assert spelling in resolved.options, spelling
        _, nargs = resolved.options[spelling]
        assert (nargs == 0) == (values == 0), spelling
    from dflash_guard.launch.check import COMPARED
    from dflash_guard.trust.policy import LAUNCH_CAPS

    assert COMPARED["sglang"] | set(LAUNCH_CAPS["sglang"]) <= set(resolved.defaults)


def test_the_acceptance_gauges_are_the_ones_sglang_publishes(sglang_python) -> None:
    """monitor and the drafter check read SGLang's acceptance gauges under the names the pinned
    release declares (read from its source, never imported)."""
    source = (sglang.site_packages(Path(sglang_python)) / sglang.METRICS_SOURCE).read_text()
    for name in (SGLANG_ACCEPT_LENGTH, SGLANG_ACCEPT_RATE):
        assert f'name="{name}"' in source


def test_the_pages_sglang_check_block(cli, tmp_path, sglang_python, monkeypatch) -> None:
    """docs/vllm.md's SGLang lint, as written (a clone's root, the built-in pair): exit 1 with
    its two findings; and the command `launch sglang` prints for that lock and policy passes."""
    (tmp_path / "clone").mkdir()
    folder = clone_root(tmp_path / "clone")
    (folder / "requirements").symlink_to(REPO / "requirements")  # install-sglang.sh's pins
    output = run_block("sglang-check", folder, exit_code=1)
    words = " ".join(output.split())
    assert "launch check: refused (sglang: 2 finding(s), worst high)" in words, output
    assert "DG-LAUNCH-CAPS" in words and "0.95" in words, output
    assert "DG-LAUNCH-NOT-LOCKED" in words and "./tokenizer" in words, output
    monkeypatch.chdir(folder)
    common = ("--lock", "pair.lock", "--policy", "sglang-policy.yaml", "--root",
              "target=pair/target", "--root", "drafter=pair/drafter")
    printed = cli("launch", "sglang", *common)
    assert printed.exit_code == 0, printed.stderr
    passed = cli("launch", "--check", "sglang", *common, "--program", sglang_python, "--",
                 *shlex.split(printed.stdout))
    assert passed.exit_code == 0, passed.stdout
    assert "launch check: passed (sglang: the command loads what the lock pins)" in passed.stdout
