"""The conventions users of pip-audit, hf, sigstore and cosign expect, on every command: `-h`,
`--json` beside `--format`, metavars written for people (no typer `<type>`), one
`-o/--output` spelling, and usage errors as one line on stderr (issue 36, item 10)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
import typer.main

from dflash_guard._cli import build_app


def _leaves(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, command) of every command and group under `command`."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _leaves(sub, (*path, name))


ALL = dict(_leaves(typer.main.get_command(build_app())))
LEAVES = {path: command for path, command in ALL.items() if not hasattr(command, "commands")}


def _options(command: Any) -> set[str]:
    return {name for param in command.params for name in (*param.opts, *param.secondary_opts)}


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # one help row per option


@pytest.mark.parametrize("path", sorted(ALL), ids=lambda p: " ".join(p) or "root")
def test_help_has_h_and_no_type_metavars(cli, path):
    short, long = cli(*path, "-h"), cli(*path, "--help")
    assert short.exit_code == 0 and long.exit_code == 0, short.stderr
    assert short.stdout == long.stdout
    text = short.stdout
    assert not re.findall(r"<[^>\s]+>", text), text  # typer's <bool>, <list[str]>, <path>
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    for placeholder in re.findall(r"[\[{]([^\]}]+)[\]}]", usage):
        assert placeholder == placeholder.upper(), usage  # {paths}, [file]: Python names


def test_the_metavar_check_can_fail(capsys):
    """Typer's own rendering of an option without a metavar is what the check above rejects."""
    app = typer.Typer()

    @app.command()
    def one(files: Annotated[list[str], typer.Option()]) -> None:
        """One."""

    app(["--help"], standalone_mode=False)
    assert re.findall(r"<[^>\s]+>", capsys.readouterr().out)


@pytest.mark.parametrize("path", sorted(p for p, c in LEAVES.items() if "--format" in _options(c)),
                         ids=" ".join)
def test_json_beside_every_format(path):
    assert "--json" in _options(LEAVES[path])


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_one_spelling_of_the_output_flag(path):
    command = LEAVES[path]
    for param in command.params:
        names = {*param.opts, *param.secondary_opts}
        if names & {"--output", "--out"} and not param.hidden:
            assert names == {"-o", "--output"}, (path, names)


@pytest.mark.parametrize(("args", "message"), [
    (["verify", "--bogus"], "No such option: --bogus (try 'dflash-guard verify -h')"),
    (["scan", "x", "--fail-on", "bogus"], "unknown severity 'bogus'"),
    (["verify", "--root", "target", "pair/target"], "Got unexpected extra argument"),
    (["difftest", "local", "--target"], "Option '--target' requires an argument"),
    (["policy", "show", "a", "b"], "(try 'dflash-guard policy show -h')"),
    (["verfy"], "Did you mean 'verify'"),  # 'verify', 'verify-app'?
])
def test_a_usage_error_is_one_line_on_stderr(cli, args, message):
    result = cli(*args)
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0] and "Value error" not in lines[0]


def test_json_is_format_json(cli, builtin_pair, tmp_path):
    lock = tmp_path / "dflash.lock"
    roots = ["--root", f"target={builtin_pair.target}", "--root", f"drafter={builtin_pair.drafter}"]
    assert cli("lock", "--target", builtin_pair.target, "--drafter", builtin_pair.drafter,
               "-o", lock, "--json").exit_code == 0
    short, long = cli("verify", "--lock", lock, *roots, "--json"), cli(
        "verify", "--lock", lock, *roots, "--format", "json")
    assert short.exit_code == long.exit_code == 0
    assert json.loads(short.stdout).keys() == json.loads(long.stdout).keys()
    assert json.loads(cli("policy", "show", "dev", "--json").stdout)["name"] == "dev"
    refused = cli("scan", builtin_pair.drafter, "--json", "--format", "sarif")
    assert refused.exit_code == 2 and "--json and --format sarif" in refused.stderr


def test_output_is_o_or_output_and_nothing_else(cli, builtin_pair, tmp_path):
    report = tmp_path / "scan.json"
    assert cli("scan", builtin_pair.drafter, "--json", "-o", report).exit_code in (0, 1)
    assert "findings" in json.loads(report.read_text())
    common = ["advisory", "new", "--id", "x_ACME-1", "--summary", "s", "--pypi", "dflash",
              "--version", "0.1.0"]
    assert cli(*common, "-o", tmp_path / "a.json").exit_code == 0
    assert cli(*common, "--output", tmp_path / "b.json").exit_code == 0
    assert json.loads((tmp_path / "b.json").read_text())["id"] == "x_ACME-1"
    old = cli(*common, "--out", tmp_path / "c.json")  # never released: not an alias
    assert old.exit_code == 2 and not (tmp_path / "c.json").exists()
    missing = cli(*common)
    assert missing.exit_code == 2 and "-o/--output" in missing.stderr


def test_an_unknown_policy_name_gets_a_suggestion(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(cli("policy", "show", "dev").stdout)
    for typo, meant in (("stric", "'strict'"), ("dfault", "'default'"), ("mine", "'mine.yaml'"),
                        ("./mine.yml", "'mine.yaml'")):
        result = cli("gate", "--policy", typo)
        assert result.exit_code == 2 and f"did you mean {meant}?" in result.stderr, result.stderr
    far = cli("gate", "--policy", "zzzz")
    assert far.exit_code == 2 and "did you mean" not in far.stderr


def test_a_policy_copy_does_not_keep_the_builtin_name(cli, tmp_path):
    shown = cli("policy", "show", "default").stdout
    assert "\nname: default-copy\n" in shown and "\nname: default\n" not in shown
    copy = tmp_path / "copy.yaml"
    copy.write_text(shown)
    checked = cli("policy", "check", copy, "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout)["name"] == "default-copy"
