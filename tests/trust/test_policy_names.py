"""Issue 15 item 2: a built-in policy name always means the shipped policy; a file is a path."""

from __future__ import annotations

import pytest

from dflash_guard.errors import InputError
from dflash_guard.trust.policy import builtin_policy_path, is_builtin, load_policy
from tests.support.trust import REPO, policy_text


def _plant_permissive_file(folder, name: str) -> None:
    """A file named like a built-in policy, but permissive (the dev policy, renamed)."""
    text = (REPO / "policies" / "dev.yaml").read_text()
    (folder / name).write_text(text.replace("name: dev", f"name: {name}", 1))


@pytest.mark.parametrize("name", ["strict", "default", "dev"])
def test_builtin_name_ignores_a_file_of_that_name_in_the_cwd(tmp_path, monkeypatch, name):
    _plant_permissive_file(tmp_path, name)
    monkeypatch.chdir(tmp_path)
    policy = load_policy(name)
    assert policy.source == str(builtin_policy_path(name)) and is_builtin(policy)
    assert policy.digest != load_policy(f"./{name}").digest or name == "dev"


def test_policy_check_of_a_builtin_name_reports_the_shipped_file(cli, tmp_path, monkeypatch):
    _plant_permissive_file(tmp_path, "strict")
    monkeypatch.chdir(tmp_path)
    result = cli("policy", "check", "strict")  # exit 1: the shipped strict names no signer
    assert result.exit_code == 1 and str(builtin_policy_path("strict")) in result.stdout


def test_a_file_is_given_as_a_path(tmp_path, monkeypatch):
    (tmp_path / "mine.yaml").write_text(policy_text())
    (tmp_path / "mine").write_text(policy_text())
    monkeypatch.chdir(tmp_path)
    assert not is_builtin(load_policy("mine.yaml"))
    assert load_policy("./mine").source == "mine"
    with pytest.raises(InputError, match=r"not a built-in policy.*\./mine"):
        load_policy("mine")
