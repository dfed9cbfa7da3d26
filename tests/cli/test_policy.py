"""`dflash-guard policy check` and `policy show`."""

from __future__ import annotations

import json

from tests.support.trust import REPO, one_line, policy_text


def test_policy_check_valid(cli):
    result = cli("policy", "check", REPO / "policies" / "dev.yaml")
    assert result.exit_code == 0
    assert "valid (policy 'dev'" in result.stdout
    strict = cli("policy", "check", REPO / "policies" / "strict.yaml")  # names no signer
    assert strict.exit_code == 1 and "valid (policy 'strict'" in strict.stdout


def test_policy_check_invalid_is_exit_2_with_one_line(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(policy_text(("fail_on: high", "fail_on: high\n  extra: 1")))
    result = cli("policy", "check", bad)
    assert result.exit_code == 2
    message = one_line(result.stderr)
    assert f"{bad}:" in message and "scan.extra: unknown field" in message
    assert "Traceback" not in result.stderr


def test_policy_check_expired_waiver_is_a_finding(cli, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(policy_text(("waivers: []\n", """waivers:
  - id: W-old
    covers: engine:vllm
    reason: PR build
    owner: alice@example.com
    expires: 2020-01-01
""")))
    result = cli("policy", "check", path, "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["expired_waivers"] == [
        {"id": "W-old", "covers": "engine:vllm", "expires": "2020-01-01"}]


def test_policy_show_without_argument_prints_the_default(cli):
    result = cli("policy", "show", "--format", "json")
    assert result.exit_code == 0
    effective = json.loads(result.stdout)
    assert effective["name"] == "default"
    assert effective["orgs"]["official"] == ["z-lab", "incoai"]
    assert effective["waivers"] == []


def test_policy_show_text_is_yaml(cli):
    result = cli("policy", "show", "dev")
    assert result.exit_code == 0
    assert "name: dev-copy\n" in result.stdout and "digest: sha256:" in result.stdout


def test_policy_show_missing_file_is_exit_2(cli, tmp_path):
    result = cli("policy", "show", tmp_path / "nope.yaml")
    assert result.exit_code == 2 and "cannot read policy" in one_line(result.stderr)
