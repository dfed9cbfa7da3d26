"""The policy schema: shipped policies validate; every malformed field is named with its line."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.trust.policy import (
    BUILTIN_POLICIES,
    RemoteCode,
    builtin_policy_path,
    load_policy,
    parse_policy,
)
from tests.support.trust import DEFAULT_POLICY, REPO, policy_text


@pytest.mark.parametrize("name", BUILTIN_POLICIES)
def test_policy_shipped_files_validate(name):
    policy = load_policy(REPO / "policies" / f"{name}.yaml")
    assert policy.name == name
    assert set(policy.tiers) == {"official", "community", "unknown"}
    assert policy.digest.startswith("sha256:") and len(policy.digest) == 71


def test_policy_repo_folder_is_the_package_data():
    """One source of truth: top-level policies/ is the packaged folder, not a copy."""
    assert (REPO / "policies").resolve() == builtin_policy_path("default").parent.resolve()


def test_policy_default_resolves_without_argument():
    assert load_policy(None).source == str(builtin_policy_path("default"))
    assert load_policy("strict").name == "strict"


def test_policy_strict_is_stricter_than_default():
    strict, default = load_policy("strict"), load_policy("default")
    assert strict.lockfile_signature_required and not default.lockfile_signature_required
    assert strict.require_release and not strict.allow_pr_head
    assert strict.local_tier == "unknown"
    assert not any(rule.pickle_allowed for rule in strict.tiers.values())
    assert strict.tiers["unknown"].remote_code is RemoteCode.deny
    assert strict.target_finite and not default.target_finite
    assert not load_policy("dev").target_finite


def test_policy_tiers_by_org():
    policy = load_policy(DEFAULT_POLICY)
    assert policy.tier_of("hub", "z-lab/Qwen3.8-27B-DFlash2") == "official"
    assert policy.tier_of("hub", "Z-Lab/Qwen3.8-27B-DFlash2") == "official"
    assert policy.tier_of("hub", "RadixArk/Qwen3.8-27B-DSpark") == "community"
    assert policy.tier_of("hub", "z-lab-mirror/Qwen3.8-27B-DFlash2") == "unknown"
    assert policy.tier_of("local", None) == policy.local_tier == "official"


def _error(text: str) -> str:
    with pytest.raises(InputError) as info:
        parse_policy(text, "p.yaml")
    return str(info.value)


def _line_of(text: str, needle: str) -> int:
    return text.splitlines().index(next(x for x in text.splitlines() if needle in x)) + 1


def test_policy_unknown_field_names_file_line_and_field():
    text = policy_text(("  fail_on: high\n", "  fail_on: high\n  fail_open: true\n"))
    assert _error(text) == (f"p.yaml:{_line_of(text, 'fail_open')}: scan.fail_open: "
                            "unknown field (allowed: fail_on, target_finite)")


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ("min_tau: 1.5", "min_tau: fast", "difftest.min_tau", "expected a number >= 1"),
        ("min_tau: 1.5", "min_tau: 1.5\n  max_logprob_delta: -1", "difftest.max_logprob_delta",
         "a finite number of nats >= 0"),
        ("min_tau: 1.5", "min_tau: 1.5\n  max_logprob_delta: .inf", "difftest.max_logprob_delta",
         "a finite number of nats >= 0"),
        ("max_params: 4000000000", "max_params: -1", "drafter.max_params", "integer > 0"),
        ("fail_on: high", "fail_on: severe", "scan.fail_on", "one of low, medium, high"),
        ("target_finite: false", "target_finite: 1", "scan.target_finite", "true or false"),
        ("remote_code: deny", "remote_code: maybe", "tiers.unknown.remote_code", "reviewed-only"),
        ("allow_pr_head: true", "allow_pr_head: 1", "engines.allow_pr_head", "true or false"),
        ("local_tier: official", "local_tier: trusted", "local_tier", "one of official"),
        ("policy_version: 1", "policy_version: 2", "policy_version", "unsupported version 2"),
        ("  require_release: false\n", "", "engines", "missing required field 'require_release'"),
        ("    staging_required: true\n", "    staging_required: true\n    staging_required: no\n",
         "tiers.community.staging_required", "field given twice"),
    ],
)
def test_policy_bad_field_is_named(old, new, field, message):
    error = _error(policy_text((old, new)))
    assert error.startswith("p.yaml:") and f": {field}: " in error and message in error


def test_policy_empty_or_non_mapping_never_means_allow():
    assert "empty" in _error("")
    assert "expected a mapping" in _error("- allow\n")
    assert "missing required field 'name'" in _error("policy_version: 1\n")


def test_policy_bad_yaml_names_line():
    assert _error("policy_version: 1\nname: [unclosed\n").startswith("p.yaml:3: not valid YAML")


def test_policy_python_tags_are_an_input_error_not_executed():
    text = policy_text(("name: default", 'name: !!python/object/apply:os.system ["true"]'))
    error = _error(text)
    assert error.startswith(f"p.yaml:{_line_of(text, '!!python')}: name: could not determine")


def test_policy_required_signature_with_no_signer_cannot_pass():
    """Fails closed: a signature nobody is accepted to make is read (a base to extend), and
    marked unsatisfiable, which the gate refuses (tests/gate/test_gate_evidence.py)."""
    policy = parse_policy(policy_text(("lockfile_required: false", "lockfile_required: true")),
                          "p.yaml")
    assert "lockfile_required is true but it names no lockfile signer" in policy.unsatisfiable[0]
    policy = parse_policy(policy_text(("    signature_required: false\n    remote_code: deny",
                                       "    signature_required: true\n    remote_code: deny")),
                          "p.yaml")
    assert "tier unknown requires model signatures" in policy.unsatisfiable[0]


def test_policy_public_key_must_exist(tmp_path):
    text = policy_text(("models: {identities: [], public_keys: []}",
                        "models: {identities: [], public_keys: [missing.pub]}"))
    with pytest.raises(InputError, match=r"signatures\.models\.public_keys\[0\]: public key"):
        parse_policy(text, "p.yaml", base=tmp_path)


WAIVERS = """waivers:
  - id: W-1
    covers: engine:vllm
    reason: DFlash support only on the PR branch
    owner: alice@example.com
    expires: 2026-09-30
  - id: W-2
    covers: scan:remote-code-exec
    reason: reviewed by hand
    owner: bob@example.com
    expires: 2099-01-01
"""


def test_policy_waivers_expire_the_day_after():
    policy = parse_policy(policy_text(("waivers: []\n", WAIVERS)), "p.yaml")
    assert policy.waiver("engine", "vllm", dt.date(2026, 9, 30)).id == "W-1"
    assert policy.waiver("engine", "vllm", dt.date(2026, 10, 1)) is None
    assert [w.id for w in policy.expired_waivers(dt.date(2026, 10, 1))] == ["W-1"]
    assert policy.expired_waivers(dt.date(2026, 9, 30)) == []
    assert policy.waiver("engine", "sglang", dt.date(2026, 9, 1)) is None


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("covers: engine:vllm", "covers: everything", "waivers[0].covers: expected KIND:TARGET"),
        ("expires: 2026-09-30", "expires: soon", "waivers[0].expires: expected a date"),
        ("  - id: W-2", "  - id: W-1", "waivers: a waiver id appears more than once"),
        ("    owner: bob@example.com\n", "", "waivers[1]: missing required field 'owner'"),
    ],
)
def test_policy_bad_waiver_is_rejected(old, new, message):
    assert message in _error(policy_text(("waivers: []\n", WAIVERS.replace(old, new))))


def test_policy_staging_approvals_match_exact_commit():
    commit = "a" * 40
    text = policy_text(("staging_approvals: []\n", f"""staging_approvals:
  - artifact: RadixArk/Qwen3.8-27B-DSpark@{commit}
    approver: carol@example.com
    date: 2026-09-01
"""))
    policy = parse_policy(text, "p.yaml")
    assert policy.staging_approved("RadixArk/Qwen3.8-27B-DSpark", commit).approver == (
        "carol@example.com")
    assert policy.staging_approved("RadixArk/Qwen3.8-27B-DSpark", "b" * 40) is None
    short = text.replace(f"@{commit}", "@abc1234")
    assert "staging_approvals[0].artifact: expected ORG/NAME@<40-hex commit>" in _error(short)


def test_policy_reviewed_code_needs_full_sha256():
    entry = """reviewed_code:
  - sha256: {sha}
    path: modeling_dflash.py
    reviewer: dave@example.com
    date: 2026-09-01
"""
    good = parse_policy(policy_text(("reviewed_code: []\n", entry.format(sha="c" * 64))), "p")
    assert good.reviewed_sha256 == frozenset({"c" * 64})
    assert "reviewed_code[0].sha256: expected a 64-hex sha256" in _error(
        policy_text(("reviewed_code: []\n", entry.format(sha="c" * 12))))


def test_policy_difftest_prompt_file_is_relative_to_the_policy(tmp_path: Path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    text = policy_text(("prompts: builtin", "prompts: prompts.jsonl"))
    (tmp_path / "p.yaml").write_text(text)
    assert load_policy(tmp_path / "p.yaml").difftest.prompts == str(tmp_path / "prompts.jsonl")
    (tmp_path / "prompts.jsonl").unlink()
    with pytest.raises(InputError, match="difftest.prompts: prompt file"):
        load_policy(tmp_path / "p.yaml")


def test_policy_sets_its_own_logprob_tolerance(tmp_path: Path):
    """`difftest.max_logprob_delta`: absent, the measured tolerance of the served precision."""
    (tmp_path / "p.yaml").write_text(policy_text(("min_tau: 1.5", "min_tau: 1.5\n"
                                                  "  max_logprob_delta: 0.002")))
    assert load_policy(tmp_path / "p.yaml").difftest.max_logprob_delta == 0.002
    (tmp_path / "q.yaml").write_text(policy_text())
    assert load_policy(tmp_path / "q.yaml").difftest.max_logprob_delta is None
