"""Policies as a newcomer writes them (newcomer P6 and "below the top ten"): an error names the
line of the user's own file, not of the merged document; `extends:` and `review --extends`
take a policy file as well as a built-in; `policy check` fails a policy the gate can never
pass."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.severity import Severity
from dflash_guard.trust.policy import load_policy
from tests.support.trust import write_lock


@pytest.mark.parametrize(("text", "expected"), [
    ("extends: dev\nname: typo\nscan:\n  fail_onn: high\n",
     "typo.yaml:4: scan.fail_onn: unknown field (allowed: fail_on, target_finite)"),
    ("extends: dev\nname: typo\ndifftest: {min_tau: \"1.5\"}\n",
     "typo.yaml:3: difftest.min_tau: expected a number"),
    ("extends: dev\nname: typo\ndifftest:\n  endpoints: {metrics: maybe}\n",
     "typo.yaml:4: difftest.endpoints.metrics: expected true or false, got 'maybe'"),
])
def test_errors_name_the_line_of_the_users_file(cli, tmp_path, monkeypatch, text, expected):
    monkeypatch.chdir(tmp_path)
    Path("typo.yaml").write_text(text)
    result = cli("policy", "check", "typo.yaml")
    assert result.exit_code == 2
    assert expected in result.stderr, result.stderr


def test_extends_takes_a_policy_file(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("org").mkdir()
    Path("org/base.yaml").write_text("extends: dev\nname: org-base\nscan: {fail_on: high}\n")
    Path("mine.yaml").write_text("extends: ./org/base.yaml\nname: mine\n"
                                 "difftest: {min_tau: 1.2}\n")
    result = cli("policy", "check", "mine.yaml")
    assert result.exit_code == 0, result.stderr
    policy = load_policy("mine.yaml")
    assert policy.name == "mine" and policy.fail_on is Severity.high
    assert policy.extends == "./org/base.yaml"
    Path("org/base.yaml").write_text("extends: dev\nname: org-base\nscan:\n  fail_onn: high\n")
    broken = cli("policy", "check", "mine.yaml")  # the base's own error, at the base's line
    assert broken.exit_code == 2 and "org/base.yaml:4: scan.fail_onn" in broken.stderr
    Path("org/base.yaml").write_text("extends: ../mine.yaml\nname: loop\n")
    loop = cli("policy", "check", "mine.yaml")
    assert loop.exit_code == 2 and "extend each other" in loop.stderr
    Path("nope.yaml").write_text("extends: devv\nname: x\n")
    typo = cli("policy", "check", "nope.yaml")
    assert typo.exit_code == 2 and "expected one of default, strict, dev" in typo.stderr


def test_a_base_policy_reads_its_paths_from_its_own_folder(tmp_path, monkeypatch):
    """A path in a policy another one extends is relative to its own file, as `policy check` of
    that file alone reads it: a file of the same name planted beside the extending policy (a
    team's folder) never stands in for the organisation's prompt set or signer key; the team's
    own paths are read from the team's folder, and an error in the base names the base's line."""
    monkeypatch.chdir(tmp_path)
    prompts = (Path(__file__).resolve().parents[2] / "kernels_ref/prompts/default.jsonl")
    for folder in ("org", "teams/a"):
        Path(folder).mkdir(parents=True)
        shutil.copyfile(prompts, f"{folder}/prompts.jsonl")
        Path(f"{folder}/team.pub").write_text(f"{folder}'s key")
    Path("org/base.yaml").write_text(
        "extends: dev\nname: org-base\ndifftest: {prompts: ./prompts.jsonl}\nsignatures:\n"
        "  lockfile: {identities: [], public_keys: [./team.pub]}\n")
    Path("teams/a/mine.yaml").write_text("extends: ../../org/base.yaml\nname: mine\n")
    policy = load_policy("teams/a/mine.yaml")
    assert Path(policy.difftest.prompts or "").resolve() == (tmp_path / "org/prompts.jsonl")
    assert [key.resolve() for key in policy.lockfile_signers.public_keys] == [
        tmp_path / "org/team.pub"]
    Path("teams/a/mine.yaml").write_text("extends: ../../org/base.yaml\nname: mine\n"
                                         "difftest: {prompts: ./prompts.jsonl}\n")
    assert Path(load_policy("teams/a/mine.yaml").difftest.prompts or "").resolve() == (
        tmp_path / "teams/a/prompts.jsonl")
    Path("org/team.pub").unlink()
    with pytest.raises(InputError, match=r"org/base\.yaml:5: signatures\.lockfile\.public_keys"):
        load_policy("teams/a/mine.yaml")


def test_policy_check_fails_a_policy_the_gate_can_never_pass(cli, tmp_path, monkeypatch):
    """policies.md's `policy show strict > my-strict.yaml; policy check my-strict.yaml`."""
    monkeypatch.chdir(tmp_path)
    shown = cli("policy", "show", "strict")
    Path("my-strict.yaml").write_text(shown.stdout)
    result = cli("policy", "check", "my-strict.yaml")
    assert result.exit_code == 1
    assert "the gate refuses it as it stands" in result.stdout
    assert cli("policy", "check", "dev").exit_code == 0


def test_review_extends_a_policy_file(cli, locked_pair, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    Path("org.yaml").write_text("extends: strict\nname: org\nlocal_tier: official\n")
    Path("out").mkdir()
    result = cli("review", "--lock", "dflash.lock", "--root", f"target={locked_pair.target}",
                 "--root", f"drafter={locked_pair.drafter}", "--extends", "./org.yaml",
                 "--reviewer", "me@example.com", "-o", "out/prod.yaml", "-q")
    assert result.exit_code == 0, result.stdout + result.stderr
    text = Path("out/prod.yaml").read_text()
    assert "extends: ../org.yaml" in text and "name: org-reviewed" in text
    policy = load_policy("out/prod.yaml")
    assert "official" in str(policy.local_tier) and policy.reviewed_code
    missing = cli("review", "--lock", "dflash.lock", "--root", f"target={locked_pair.target}",
                  "--root", f"drafter={locked_pair.drafter}", "--extends", "./nope.yaml")
    assert missing.exit_code == 2 and "or a policy file" in missing.stderr


def test_a_gate_under_a_policy_extending_a_file_approves_and_records_the_base(
        cli, locked_pair, tmp_path, monkeypatch):
    """The record names the base file by its sha256 (the policy closure), so verify-approval
    notices a base changed after the approval."""
    import json

    monkeypatch.chdir(tmp_path)
    write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    Path("org.yaml").write_text("extends: dev\nname: org\n")
    Path("mine.yaml").write_text("extends: ./org.yaml\nname: mine\n")
    roots = ("--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}")
    gated = cli("gate", "--lock", "dflash.lock", "--policy", "./mine.yaml", *roots,
                "-o", "approval.json", "-q", "--format", "json")
    assert gated.exit_code == 0, gated.stdout + gated.stderr
    assert "./org.yaml" in json.dumps(json.loads(Path("approval.json").read_text()))
