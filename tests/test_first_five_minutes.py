"""Issue 15, the first five minutes of a user: help that reads naturally, docs that work."""

from __future__ import annotations

import re

import pytest

from tests.support.trust import REPO


@pytest.mark.parametrize("command, flags", [
    ("verify", ("--download", "--no-cache")),
    ("gate", ("--download", "--sign")),
])
def test_flags_show_no_value_in_help(cli, monkeypatch, command, flags):
    monkeypatch.setenv("COLUMNS", "120")
    text = cli(command, "--help").stdout
    for flag in flags:
        [line] = [row for row in text.splitlines() if re.search(rf"{flag}\b(?!-)", row)]
        assert "<bool>" not in line, line


def test_readme_says_how_to_get_the_command_on_path_after_make_demo():
    readme = (REPO / "README.md").read_text()
    assert ". .venv/bin/activate" in readme
    assert ". .venv/bin/activate" in (REPO / "scripts" / "demo.sh").read_text()


def test_readme_documents_verify_signatures_and_what_fixtures_make_overwrites():
    readme = (REPO / "README.md").read_text()
    assert '"signatures": [{"subject"' in readme
    assert "fixtures make DIR" in readme and "overwrite" in readme


def test_readme_lock_example_pins_full_commits():
    """The "Lock and verify" example is one the default and strict policies can approve:
    every revision is a full 40-hex commit (`@main` is refused: a branch can move)."""
    section = (REPO / "README.md").read_text().split("## Lock and verify", 1)[1]
    example = section.split("```", 2)[1]
    sources = re.findall(r"--(?:target|drafter) (\S+)", example)
    pinned = re.findall(r"--(?:target|drafter) \S+@(?:<40-hex commit>|[0-9a-f]{40})", example)
    assert len(sources) == len(pinned) == 2, example
    assert "@main" in section and "require_full_sha" in section  # and why that one is refused
