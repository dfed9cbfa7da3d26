"""Every command's --help carries an example that parses; shell completion is installable."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from dflash_guard._cli import build_app
from tests.support.release import REPO, clean_env


def _leaves(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, command) of every command that is not a group (typer vendors its own click)."""
    if subcommands := getattr(command, "commands", None):
        for name, sub in sorted(subcommands.items()):
            yield from _leaves(sub, (*path, name))
    else:
        yield path, command


LEAVES = dict(_leaves(typer.main.get_command(build_app())))


def _example(command: Any) -> list[str]:
    lines = [line.strip() for line in (command.help or "").splitlines()]
    examples = [line.removeprefix("Example: ") for line in lines if line.startswith("Example: ")]
    assert len(examples) == 1, command.help
    return shlex.split(examples[0])


def test_the_command_list_is_complete():
    assert {" ".join(path) for path in LEAVES} >= {
        "lock", "verify", "scan", "difftest local", "difftest sampled", "difftest endpoint",
        "difftest reference", "difftest isolation", "sign", "gate", "export requirements",
        "fixtures make", "policy check", "policy show",
    }


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_help_shows_an_example_that_parses(cli, path: tuple[str, ...]):
    command = LEAVES[path]
    example = _example(command)
    assert example[: len(path) + 1] == ["dflash-guard", *path]
    result = cli(*path, "--help")
    assert result.exit_code == 0
    assert "Example: dflash-guard " + " ".join(path) in " ".join(result.stdout.split())
    # The example's options and arguments are ones the command accepts (nothing runs).
    command.make_context(" ".join(example[: len(path) + 1]), example[len(path) + 1:])


def test_an_example_with_a_wrong_option_does_not_parse():
    """The parse check above can fail."""
    with pytest.raises(Exception, match="No such option"):
        LEAVES[("verify",)].make_context("dflash-guard verify", ["--no-such-option"])


def test_root_help_documents_completion(cli):
    result = cli("--help")
    assert "--install-completion" in result.stdout
    assert "dflash-guard --install-completion" in " ".join(result.stdout.split())


def test_completion_script_names_the_console_script():
    script = Path(sys.executable).parent / "dflash-guard"
    result = subprocess.run([str(script), "--show-completion", "bash"], capture_output=True,
                            text=True, env=clean_env(PYTHONPATH=str(REPO)), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "_DFLASH_GUARD_COMPLETE=complete_bash" in result.stdout
