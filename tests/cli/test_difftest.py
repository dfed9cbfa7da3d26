"""`dflash-guard difftest MODE` and `fixtures make`: reports, exit codes 0/1/2, no tracebacks,
each mode's own flags only, and the deprecated one-command spelling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernels_ref.fixtures import make_fixture_pair

FAST = [
    '{"id": "code", "prompt": "def mean(data):\\n    "}',
    '{"id": "one", "prompt": "x", "max_new_tokens": 24}',
]


@pytest.fixture
def fast_prompts(tmp_path: Path) -> Path:
    path = tmp_path / "fast.jsonl"
    path.write_text("\n".join(FAST) + "\n")
    return path


def test_fixtures_make_writes_the_pair(cli, tmp_path: Path) -> None:
    result = cli("fixtures", "make", tmp_path / "pair")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "pair" / "target" / "model.safetensors").is_file()
    assert (tmp_path / "pair" / "drafter" / "dflash.py").is_file()
    (tmp_path / "file").write_text("x")
    assert cli("fixtures", "make", tmp_path / "file").exit_code == 2


def test_identical_pair_exits_0_with_a_json_report(cli, builtin_pair, fast_prompts) -> None:
    target, drafter = builtin_pair.target, builtin_pair.drafter
    result = cli(
        "difftest",
        "local",
        "--target",
        target,
        "--drafter",
        drafter,
        "--prompts",
        fast_prompts,
        "--max-new-tokens",
        "32",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is True and report["mode"] == "local"
    assert report["overall"]["identical"] is True
    assert {"tau_mean", "histogram", "forwards_saved", "warnings"} <= set(report["overall"])
    first = report["prompts"][0]
    assert {
        "id",
        "identical",
        "first_diff_position",
        "ar_token",
        "spec_token",
        "top2_margin",
        "tau",
        "steps",
        "target_forwards_ar",
        "target_forwards_spec",
    } <= set(first)
    text = cli(
        "difftest",
        "local",
        "--target",
        target,
        "--drafter",
        drafter,
        "--prompts",
        fast_prompts,
        "--max-new-tokens",
        "16",
    )
    assert text.exit_code == 0 and "identical" in text.stdout


def test_injected_fault_exits_1(cli, builtin_pair, fast_prompts) -> None:
    target, drafter = builtin_pair.target, builtin_pair.drafter
    result = cli(
        "difftest",
        "local",
        "--target",
        target,
        "--drafter",
        drafter,
        "--prompts",
        fast_prompts,
        "--inject",
        "stale-kv",
        "--format",
        "json",
    )
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["passed"] is False
    assert report["overall"]["identical"] is False
    assert report["overall"]["divergences"]


def test_input_errors_exit_2(cli, tmp_path: Path, builtin_pair, fast_prompts) -> None:
    target, drafter = builtin_pair.target, builtin_pair.drafter
    cases = [
        ("--target", tmp_path / "missing", "--drafter", drafter),
        ("--target", target, "--drafter", drafter, "--inject", "no-such-fault"),
        ("--target", target, "--drafter", drafter, "--dtype", "int3"),
        ("--target", target, "--drafter", drafter, "--prompts", tmp_path / "none.jsonl"),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "x", "colour": "red"}\n')
    cases.append(("--target", target, "--drafter", drafter, "--prompts", bad))
    for args in cases:
        result = cli("difftest", "local", *args)
        assert result.exit_code == 2, (args, result.stdout, result.stderr)
        assert "error:" in result.stderr and "Traceback" not in result.stderr


def test_mismatched_drafter_exits_2(cli, tmp_path: Path) -> None:
    target, drafter = make_fixture_pair(tmp_path)
    config = json.loads((drafter / "config.json").read_text())
    config["num_target_layers"] = 7
    (drafter / "config.json").write_text(json.dumps(config))
    result = cli("difftest", "local", "--target", target, "--drafter", drafter)
    assert result.exit_code == 2
    assert "does not match its target" in result.stderr


def test_block_size_beyond_the_context_exits_2(cli, builtin_pair, fast_prompts) -> None:
    """A huge block size (flag or drafter config) used to hang building 1..N histograms."""
    target, drafter = builtin_pair.target, builtin_pair.drafter
    result = cli("difftest", "local", "--target", target, "--drafter", drafter,
                 "--prompts", fast_prompts, "--block-size", "1000000000")
    assert result.exit_code == 2
    assert "exceeds the target's context" in result.stderr


LOCAL = ("local", "--target", "t", "--drafter", "d")
SAMPLED = ("sampled", "--target", "t", "--drafter", "d")
ENDPOINT = ("endpoint", "--baseline", "http://127.0.0.1:9", "--candidate", "http://127.0.0.1:9")
ISOLATION = ("isolation", "--candidate", "http://127.0.0.1:9")
REFERENCE = ("reference", "--target", "t", "--candidate", "http://127.0.0.1:9")
RUNNER = (("--block-size", "4"), ("--device", "cpu"), ("--dtype", "float64"))
ENGINE = (("--model", "m"), ("--concurrency", "2"), ("--api-key-env", "K"),
          ("--near-tie-margin", "0.1"), ("--timeout", "3"))
SAMPLING = (("--samples", "5"), ("--sample-tokens", "2"), ("--temperature", "0.5"),
            ("--top-k", "3"), ("--top-p", "0.5"), ("--alpha", "0.1"), ("--seed", "1"))


@pytest.mark.parametrize(
    ("mode", "flag"),
    [
        *((ENDPOINT, flag) for flag in (
            ("--target", "t"), ("--drafter", "d"), *RUNNER, ("--cuda-graphs",),
            ("--inject", "stale-kv"), *SAMPLING, ("--gguf", "g"), ("--record", "r"))),
        *((SAMPLED, flag) for flag in (
            ("--max-new-tokens", "8"), ("--cuda-graphs",), ("--fail-on-warning",), *ENGINE,
            ("--metrics", "http://127.0.0.1:9/metrics"), ("--no-token-ids",))),
        *((LOCAL, flag) for flag in (
            *SAMPLING, *ENGINE, ("--metrics", "http://127.0.0.1:9/metrics"),
            ("--no-token-ids",), ("--baseline", "http://127.0.0.1:9"))),
        *((ISOLATION, flag) for flag in (
            ("--baseline", "http://127.0.0.1:9"), ("--metrics", "http://127.0.0.1:9/metrics"),
            ("--inject", "stale-kv"), ("--fail-on-warning",), *RUNNER)),
        *((REFERENCE, flag) for flag in (
            ("--no-token-ids",), ("--inject", "stale-kv"), *SAMPLING)),
    ],
)
def test_a_flag_of_another_mode_is_refused(cli, mode, flag) -> None:
    """Each mode is its own command: a flag of another mode is a usage error, never ignored."""
    result = cli("difftest", *mode, *flag)
    assert result.exit_code == 2, (flag, result.stdout, result.stderr)
    assert "No such option" in result.stderr and flag[0] in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("mode", ["local", "sampled", "endpoint", "reference", "isolation"])
def test_each_mode_help_fits_80_columns(cli, monkeypatch, mode) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = cli("difftest", mode, "--help")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80
    assert "\u2026" not in result.stdout  # no option name cut short
    assert f"Example: dflash-guard difftest {mode}" in " ".join(result.stdout.split())


def test_flags_of_the_chosen_mode_reach_the_library(cli, tmp_path: Path) -> None:
    """The same flags reach the library in their own mode (here: it fails on the folder)."""
    missing = tmp_path / "missing"
    for args in (
        ("local", "--target", missing, "--drafter", missing, "--block-size", "4",
         "--fail-on-warning"),
        ("sampled", "--target", missing, "--drafter", missing, "--samples", "5", "--seed", "1"),
    ):
        result = cli("difftest", *args)
        assert result.exit_code == 2 and "model folder not found" in result.stderr, result.stderr


def test_the_old_one_command_spelling_is_a_usage_error(cli, tmp_path: Path) -> None:
    """`difftest --FLAGS` was never released: it is not a mode, so a usage error (exit 2)."""
    missing = tmp_path / "missing"
    result = cli("difftest", "--sampled", "--target", missing, "--drafter", missing)
    assert result.exit_code == 2 and "Traceback" not in result.stderr


def test_threads_are_chosen_honoured_and_reported(cli, builtin_pair, fast_prompts,
                                                  monkeypatch) -> None:
    """The tiny pair runs on one thread by default; `--threads N` runs it on N; the JSON says
    which and why."""
    import torch

    from dflash_guard.lossless import local

    seen: list[int] = []
    real = local.difftest_models

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(local, "difftest_models", spy)
    args = ("difftest", "local", "--target", builtin_pair.target, "--drafter", builtin_pair.drafter,
            "--prompts", fast_prompts, "--max-new-tokens", "4", "--format", "json")
    torch.set_num_threads(3)
    auto = cli(*args)
    assert auto.exit_code == 0, auto.stderr
    threads = json.loads(auto.stdout)["threads"]
    assert threads["threads"] == 1 and threads["reason"].startswith("auto: ")
    forced = cli(*args, "--threads", "2")
    assert forced.exit_code == 0, forced.stderr
    assert json.loads(forced.stdout)["threads"] == {"threads": 2, "reason": "--threads 2"}
    assert seen == [1, 2] and torch.get_num_threads() == 3  # restored afterwards
    assert cli(*args, "--threads", "0").exit_code == 2
