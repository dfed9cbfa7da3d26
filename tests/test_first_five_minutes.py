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


def test_docs_document_verify_signatures_and_what_fixtures_make_overwrites():
    docs = REPO / "docs"
    assert '"signatures": [{"subject"' in (docs / "lock-and-verify.md").read_text()
    difftest = (docs / "diff-testing.md").read_text()
    assert "fixtures make DIR" in difftest and "overwrite" in difftest


def lock_command(text: str) -> str:
    """The first `dflash-guard lock` command of the first code block, continuation lines joined."""
    block = text.split("```", 2)[1]
    return re.search(r"^dflash-guard lock (?:.*\\\n)*.*$", block, flags=re.MULTILINE)[0]


def test_lock_examples_pin_full_commits():
    """The lock examples (the README's real deploy, the first block of docs/lock-and-verify.md)
    are ones the default and strict policies can approve: every revision is a full 40-hex commit
    (`@main` is refused: a branch can move)."""
    page = (REPO / "docs" / "lock-and-verify.md").read_text()
    readme = (REPO / "README.md").read_text().split("## A real deploy", 1)[1]
    for example in (lock_command(page), lock_command(readme)):
        sources = re.findall(r"--(?:target|drafter) (\S+)", example)
        pinned = re.findall(r"--(?:target|drafter) \S+@(?:<40-hex commit>|[0-9a-f]{40})", example)
        assert len(sources) == len(pinned) == 2, example
    assert "@main" in page and "require_full_sha" in page  # and why that one is refused


def test_docs_name_a_hub_command_that_exists():
    """`huggingface-cli` is gone from huggingface_hub 1.0 on; the docs name `hf models info`."""
    text = (REPO / "README.md").read_text() + (REPO / "docs" / "lock-and-verify.md").read_text()
    assert "huggingface-cli" not in text
    assert "hf models info" in text
