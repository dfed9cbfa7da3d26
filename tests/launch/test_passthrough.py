"""Engine arguments after `launch ... --` pass only from an allowlist per engine (P2 of the
2026-12-02 attack findings): every other spelling of a setting launch controls, config files,
dotted arguments and unknown flags are refused; `--exec` clears the engines' setting variables.
The lists are proved against the pinned engines: vLLM's own parser, llama.cpp's `arg.cpp`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_guard.launch import passthrough
from dflash_guard.launch.check import COMPARED, WHY
from dflash_guard.launch.engines import LaunchCommand
from dflash_guard.launch.vllm_parser import resolve
from dflash_guard.pins.resolve import build_lock
from tests.support import llamacpp, vllm
from tests.support.hostile import one_line_error
from tests.support.launch import LAUNCH
from tests.support.trust import write_lock, write_policy

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import llamacpp_flags  # noqa: E402  (scripts/llamacpp_flags.py, the table's generator)


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    """The default policy with launch caps, comparisons of the GGUFs not required (what is
    tested here is the pass-through list)."""
    path = write_policy(tmp_path / "policy")
    path.write_text(path.read_text().replace("gguf_requires_comparison: true",
                                             "gguf_requires_comparison: false") + LAUNCH)
    return path


@pytest.fixture
def gguf_pair(tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    for role in ("target", "drafter"):
        (tmp_path / role).mkdir()
        (tmp_path / role / f"{role}.gguf").write_bytes(b"GGUF" + role.encode())
    lock = write_lock(build_lock({r: str(tmp_path / r) for r in ("target", "drafter")}).lock,
                      tmp_path / "gguf.lock")
    return lock, ("--root", f"target={tmp_path / 'target'}",
                  "--root", f"drafter={tmp_path / 'drafter'}")


def _vllm(cli, pair, lock: Path, policy: Path, *extra: str):
    return cli("launch", "vllm", "--lock", lock, "--policy", policy, "--root",
               f"target={pair.target}", "--root", f"drafter={pair.drafter}", "--", *extra)


@pytest.mark.parametrize(("extra", "reason"), [
    # P2: a config file and dotted arguments re-set the tokenizer, trust and the drafter
    (["--config", "/nonexistent/extra.yaml"], "config file"),
    (["--config=/nonexistent/extra.yaml"], "config file"),
    (["--speculative-config.model", "/nonexistent/evil-drafter"], "dotted"),
    (["--speculative_config.method=dflash"], "dotted"),
    (["--hf-overrides.architectures", '["EvilForCausalLM"]'], "dotted"),
    # other spellings of what launch sets: `_` for `-`, `=`, an argparse abbreviation
    (["--trust_remote_code"], "launch sets it"),
    (["--tokenizer=/nonexistent/evil-tokenizer"], "launch sets it"),
    (["--trust-remote"], "pass-through list"),
    (["--tok", "/nonexistent/evil-tokenizer"], "pass-through list"),
    # loading and code channels no deny-list named
    (["--tokenizer-mode", "mistral"], "pass-through list"),
    (["--chat-template", "/nonexistent/t.jinja"], "pass-through list"),
    (["--hf-config-path", "/nonexistent"], "pass-through list"),
    (["--model-loader-extra-config", "{}"], "pass-through list"),
    (["--worker-extension-cls", "evil.Ext"], "pass-through list"),
    (["--lora-modules", "x=/nonexistent"], "pass-through list"),
    (["-O3"], "pass-through list"),
    (["/nonexistent/evil-model"], "positional"),
    (["--dtype", "--config"], "needs its value"),
])
def test_vllm_arguments_off_the_list_are_refused(cli, padded_pair, padded_lock, policy, extra,
                                                 reason) -> None:
    message = one_line_error(_vllm(cli, padded_pair, padded_lock, policy, *extra))
    assert reason in message


def test_vllm_arguments_on_the_list_pass(cli, padded_pair, padded_lock, policy) -> None:
    extra = ("--enforce-eager", "--dtype", "float32", "--seed=0", "-tp", "1",
             "--disable-log-stats", "--served-model-name", "m")
    result = _vllm(cli, padded_pair, padded_lock, policy, *extra)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith(" ".join(extra))


@pytest.mark.parametrize(("extra", "reason"), [
    (["--spec-draft-model", "/nonexistent/evil-draft.gguf"], "launch sets it"),  # P2
    (["-hfr", "example.invalid/evil-GGUF"], "launch sets it"),  # P2: -hf's alias
    (["--model_draft", "/nonexistent/evil-draft.gguf"], "launch sets it"),
    (["-hfrd", "example.invalid/evil-GGUF"], "launch sets it"),
    (["--spec-draft-hf", "example.invalid/evil-GGUF"], "launch sets it"),
    (["-mu", "http://example.invalid/evil.gguf"], "launch sets it"),
    (["-dr", "example.invalid/evil"], "launch sets it"),
    (["--lora", "/nonexistent/adapter.gguf"], "pass-through list"),
    (["--override-kv", "tokenizer.ggml.bos_token_id=int:2"], "pass-through list"),
    (["--chat-template-file", "/nonexistent/t.jinja"], "pass-through list"),
    (["--models-preset", "/nonexistent/p.ini"], "config file"),
    (["-c", "99999"], "launch sets it"),  # a policy cap, under its short spelling
    (["--threads=2"], "no `--flag=value` form"),
])
def test_llama_cpp_arguments_off_the_list_are_refused(cli, gguf_pair, policy, extra,
                                                      reason) -> None:
    lock, roots = gguf_pair
    message = one_line_error(cli("launch", "llama.cpp", "--lock", lock, "--policy", policy,
                                 *roots, "--", *extra))
    assert reason in message


def test_llama_cpp_arguments_on_the_list_pass(cli, gguf_pair, policy) -> None:
    lock, roots = gguf_pair
    extra = ("-t", "1", "--metrics", "--no-webui", "-fa", "on", "--seed", "-1", "-ngl", "0")
    result = cli("launch", "llama.cpp", "--lock", lock, "--policy", policy, *roots, "--", *extra)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith(" ".join(extra))


def test_sglang_arguments_off_the_list_are_refused(cli, tmp_path, policy) -> None:
    from tests.support.launch import hub_lock

    lock = hub_lock(tmp_path / "hub.lock")
    for extra in (["--tokenizer-path", "/nonexistent"], ["--json-model-override-args", "{}"]):
        assert "after `--`" in one_line_error(cli("launch", "sglang", "--lock", lock,
                                                  "--policy", policy, "--", *extra))


def test_exec_clears_the_engines_setting_variables() -> None:
    environ = {"PATH": "/usr/bin", "VLLM_USE_MODELSCOPE": "1", "VLLM_PLUGINS": "evil",
               "VLLM_CPU_KVCACHE_SPACE": "1", "LLAMA_ARG_HF_REPO": "x/y",
               "LLAMA_ARG_SPEC_DRAFT_MODEL": "/nonexistent", "LLAMA_ARG_NO_MMAP": "1",
               "HF_TOKEN": "t", "KEY": "k"}
    vllm_env = LaunchCommand("vllm", ("python3",), {}).resolved(environ)[1]
    assert set(vllm_env) == {"PATH", "VLLM_CPU_KVCACHE_SPACE", "LLAMA_ARG_HF_REPO",
                             "LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_NO_MMAP", "HF_TOKEN", "KEY"}
    from dflash_guard.launch.engines import EnvRef

    llama_env = LaunchCommand("llama.cpp", ("llama-server",),
                              {"LLAMA_API_KEY": EnvRef("KEY")}).resolved(environ)[1]
    assert set(llama_env) == {"PATH", "VLLM_USE_MODELSCOPE", "VLLM_PLUGINS",
                              "VLLM_CPU_KVCACHE_SPACE", "KEY", "LLAMA_API_KEY"}


def test_exec_runs_the_engine_without_the_variables(padded_pair, padded_lock, policy,
                                                    tmp_path) -> None:
    program = tmp_path / "engine.sh"
    program.write_text('#!/bin/sh\necho "modelscope=${VLLM_USE_MODELSCOPE:-unset}"\n')
    program.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "dflash_guard", "launch", "vllm", "--lock", str(padded_lock),
         "--policy", str(policy), "--root", f"target={padded_pair.target}", "--baseline",
         "--program", str(program), "--exec"],
        capture_output=True, text=True, check=False, timeout=120, cwd=ROOT,
        env={**os.environ, "VLLM_USE_MODELSCOPE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "modelscope=unset"


def test_the_vllm_list_is_the_pinned_parsers() -> None:
    """Each pass-through spelling is an option of the pinned vLLM with that many values, and
    none of them sets what the check compares with the lock or what it says is loading."""
    python = str(vllm.install())
    options = resolve(python, []).options
    for spelling, values in passthrough.VLLM_FLAGS.items():
        assert spelling in options, f"{spelling}: not an option of the pinned vLLM"
        dest, nargs = options[spelling]
        assert (nargs == 0) is (values == 0), f"{spelling}: nargs {nargs!r}"
        assert dest not in COMPARED["vllm"] | set(WHY), spelling
    envs = (Path(python).parents[1] / "lib").glob("python3*/site-packages/vllm/envs.py")
    source = next(envs).read_text()
    for name in passthrough.VLLM_ENV_KEEP - {"VLLM_DO_NOT_TRACK"}:
        assert f'"{name}"' in source, f"{name}: not a variable of the pinned vLLM"


def test_the_llama_cpp_table_is_the_pinned_trees() -> None:
    """Regenerated from the pinned tree's common/arg.cpp, the table is what is committed: a
    loading flag the tree gains (or an alias) fails here until the table is regenerated."""
    tree = llamacpp.source_tree()
    committed = (ROOT / "dflash_guard" / "launch" / "llamacpp_flags.py").read_text()
    assert llamacpp_flags.generate(tree) == committed, (
        "regenerate: python scripts/llamacpp_flags.py TREE > dflash_guard/launch/llamacpp_flags.py")
    keys = {o.key for o in passthrough.LLAMACPP_SPELLINGS.values()}
    assert keys >= passthrough.LLAMACPP_KEYS
    for name in ("-md", "--model-draft", "--spec-draft-model"):  # P2: one option, three names
        assert passthrough.LLAMACPP_SPELLINGS[name].key == "spec_draft_model"
    assert passthrough.LLAMACPP_SPELLINGS["-hfr"].key == "hf_repo"


def test_the_generator_sees_every_kind_of_registration() -> None:
    """The generator on a crafted arg.cpp: a negated flag, two values, a comment in the
    handler, an example list in a variable, an option of another program, an exclusion."""
    source = r'''
static std::initializer_list<enum llama_example> mine = { LLAMA_EXAMPLE_SERVER, };
add_opt(common_arg({"-a", "--alpha"}, {"--no-alpha"}, "h", [](common_params & p, bool v) {}));
add_opt(common_arg({"--two"}, "A", "B", "h", [](common_params & p, const std::string & a,
    const std::string & b) {}).set_env("LLAMA_ARG_TWO"));
add_opt(common_arg(
    // note: "--not-a-flag" in a comment
    {"--gone"}, "N", "h", [](common_params & /*params*/, int /*value*/) {}
).set_examples(mine));
add_opt(common_arg({"--cli-only"}, "h", [](common_params & p) {})
    .set_examples({LLAMA_EXAMPLE_CLI}));
add_opt(common_arg({"--no-server"}, "h", [](common_params & p) {})
    .set_excludes({LLAMA_EXAMPLE_SERVER}));
'''
    assert llamacpp_flags.options(source) == [
        (("-a", "--alpha"), ("--no-alpha",), 0, None),
        (("--two",), (), 2, "LLAMA_ARG_TWO"),
        (("--gone",), (), 1, None),
    ]
    with pytest.raises(ValueError, match="without common_arg"):
        llamacpp_flags.options("common_arg a({\"--x\"}, \"h\", f); add_opt(a);")


def test_a_llama_cpp_config_file_refuses_the_launch(cli, gguf_pair, policy, tmp_path,
                                                    monkeypatch) -> None:
    lock, roots = gguf_pair
    config = tmp_path / "xdg" / "llama.cpp" / "config.ini"
    config.parent.mkdir(parents=True)
    config.write_text("[*]\nhf-repo = example.invalid/evil-GGUF\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    result = cli("launch", "llama.cpp", "--lock", lock, "--policy", policy, *roots,
                 "--format", "json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["passed"] is False
    assert report["verdict"] == "refused" and "config.ini" in report["reason"]
