"""Issue 25 at the gate: secrets only where the operator sends them (N8), outputs never replace
any input (N16), verdicts that cannot be vacuous, and a policy naming no signer approves nothing.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from dflash_guard.errors import InputError
from dflash_guard.gate import (
    ApprovalSigning,
    EndpointOverrides,
    GateOptions,
    resolve_api_key,
    run_gate,
)
from dflash_guard.rollout.bench import _Endpoint
from dflash_guard.trust.policy import load_policy
from tests.support.trust import (
    as_hub,
    make_key_pair,
    one_line,
    signed_lock,
    write_lock,
    write_policy,
)

DIFFTEST = "  near_tie_allowance: 0.0\n"
ENDPOINTS = DIFFTEST + ("  endpoints:\n    baseline: http://127.0.0.1:18111\n"
                        "    candidate: http://127.0.0.1:18111\n")


# --- N8: the policy picks neither the variable nor the host ----------------------------------


def test_a_policy_naming_any_variable_sends_nothing(cli, locked_pair, tmp_path, monkeypatch):
    """The doc's case: the policy asks for AWS_SECRET_ACCESS_KEY; the gate refuses to start."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI-EXAMPLEKEY")
    policy = write_policy(tmp_path, (DIFFTEST, ENDPOINTS + "    api_key_env: "
                                                           "AWS_SECRET_ACCESS_KEY\n"))
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = cli("gate", "--lock", lock, "--policy", policy,
                 "--root", f"target={locked_pair.target}",
                 "--root", f"drafter={locked_pair.drafter}")
    assert result.exit_code == 2
    assert "a key is sent only when the operator names it" in one_line(result.stderr)
    assert "EXAMPLEKEY" not in result.stdout + result.stderr


@pytest.mark.parametrize(("policy_env", "flag", "urls", "message"), [
    (None, "MY_KEY", (None, None), "named on the command line"),  # the policy's hosts
    (None, "MY_KEY", ("http://a", None), "named on the command line"),  # one policy host
    ("OTHER", "MY_KEY", ("http://a", "http://b"), "asks to send the variable OTHER"),
    ("MY_KEY", None, ("http://a", "http://b"), "asks to send the variable MY_KEY"),
])
def test_the_key_goes_only_to_hosts_the_operator_names(tmp_path, monkeypatch, policy_env, flag,
                                                       urls, message):
    monkeypatch.setenv("MY_KEY", "secret")
    monkeypatch.setenv("OTHER", "secret")
    extra = f"    api_key_env: {policy_env}\n" if policy_env else ""
    policy = load_policy(write_policy(tmp_path, (DIFFTEST, ENDPOINTS + extra)))
    with pytest.raises(InputError, match=message):
        resolve_api_key(policy, EndpointOverrides(*urls, api_key_env=flag))


def test_the_operators_key_for_the_operators_hosts(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", " secret ")
    policy = load_policy(write_policy(tmp_path, (DIFFTEST, ENDPOINTS + "    api_key_env: "
                                                                       "MY_KEY\n")))
    overrides = EndpointOverrides("http://a:1", "http://b:2", api_key_env="MY_KEY")
    assert resolve_api_key(policy, overrides) == "secret"
    assert resolve_api_key(load_policy("default"), EndpointOverrides()) is None


# --- N9: counted tokens, not claimed ones ----------------------------------------------------


class _Client:
    name, shown_url = "candidate", "http://127.0.0.1:1"


def _endpoint() -> _Endpoint:
    endpoint = object.__new__(_Endpoint)
    endpoint.client = _Client()
    return endpoint


@pytest.mark.parametrize(("payload", "count"), [
    ({"choices": [{"token_ids": [1, 2, 3, 4]}], "usage": {"completion_tokens": 10**12}}, 4),
    ({"choices": [{"logprobs": {"tokens": ["a", "b"]}}], "usage": {"completion_tokens": 9}}, 2),
    ({"choices": [{"text": "hi"}], "usage": {"completion_tokens": 3}}, 3),
])
def test_rollout_counts_the_tokens_received(payload, count):
    assert _endpoint()._received_tokens(payload, asked=4) == count


@pytest.mark.parametrize("payload", [
    {"choices": [{"text": "hi"}], "usage": {"completion_tokens": 4_000_000_000_000}},  # N9
    {"choices": [{"token_ids": list(range(5))}]},
    {"choices": [{"text": "hi"}], "usage": {"completion_tokens": True}},
])
def test_rollout_refuses_more_tokens_than_asked_or_none_counted(payload):
    from dflash_guard.lossless.endpoint import EndpointError

    with pytest.raises(EndpointError):
        _endpoint()._received_tokens(payload, asked=4)


# --- N16: no output replaces an input, whichever option named it ----------------------------


def test_gate_out_over_a_file_the_policy_names_is_refused(cli, locked_pair, tmp_path, key_pair):
    """The doc's case: --output over the policy's public key (and the other files it names)."""
    _, public = key_pair
    prompts = tmp_path / "policy" / "prompts.jsonl"
    policy = write_policy(tmp_path / "policy", (
        "  lockfile: {identities: [], public_keys: []}",
        f"  lockfile: {{identities: [], public_keys: [{public}]}}"))
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    for target in (public, prompts):
        before = target.read_bytes()
        result = cli("gate", "--lock", lock, "--policy", policy, "--root",
                     f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}",
                     "--output", target)
        assert result.exit_code == 2 and "overwrite an input" in one_line(result.stderr)
        assert target.read_bytes() == before


def test_no_command_output_replaces_a_file_it_read(cli, locked_pair, tmp_path):
    """Beyond the doc: the CLI refuses any write over a file the command read (the scanned
    code, a feed, a lockfile), whichever option named it."""
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    for path in locked_pair.drafter.iterdir():
        (drafter / path.name).write_bytes(path.read_bytes())
    code = drafter / "dflash.py"
    before = code.read_bytes()
    result = cli("scan", drafter, "--output", code, "--format", "json")
    assert result.exit_code == 2 and code.read_bytes() == before
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    feed = tmp_path / "feed.json"
    feed.write_text(json.dumps({"id": "x_A-1", "modified": "2026-11-30T00:00:00Z",
                                "affected": [{"package": {"ecosystem": "PyPI",
                                                          "name": "nothing"}}]}))
    before = feed.read_bytes()
    result = cli("audit", "--lock", lock, "--advisories", feed, "--output", feed,
                 "--format", "json")
    assert result.exit_code == 2 and "overwrite an input" in one_line(result.stderr)
    assert feed.read_bytes() == before


# --- a policy that names no signer approves nothing ------------------------------------------


def test_builtin_strict_names_no_signer_and_the_gate_refuses_it(locked_pair, tmp_path):
    strict = load_policy("strict")
    assert strict.lockfile_signers.empty and strict.model_signers.empty
    assert strict.approval_signers.empty and strict.unsatisfiable
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = run_gate(GateOptions(lock, "strict", locked_pair.roots))
    assert not result.approved
    assert result.checks[-1].name == "lockfile signature"
    assert "names no lockfile signer" in result.reason and "extends: strict" in result.reason


def test_a_policy_extending_strict_with_its_signers_passes_that_check(locked_pair, tmp_path):
    private, public = make_key_pair(tmp_path, "lock")
    _, models = make_key_pair(tmp_path, "models")
    hub = dataclasses.replace(locked_pair.lock, artifacts=tuple(
        as_hub(a, f"z-lab/{a.role}") for a in locked_pair.lock.artifacts))
    lock, _ = signed_lock(hub, tmp_path / "signed")
    (tmp_path / "signed" / "lock.pem").unlink()
    policy = tmp_path / "prod.yaml"
    policy.write_text(f"""extends: strict
name: prod
signatures:
  lockfile: {{identities: [], public_keys: [{tmp_path / 'signed' / 'lock.pub'}]}}
  models: {{identities: [], public_keys: [{models}]}}
""")
    loaded = load_policy(policy)
    assert not loaded.unsatisfiable and loaded.tiers == load_policy("strict").tiers
    result = run_gate(GateOptions(lock, policy, locked_pair.roots))
    assert result.checks[1].name == "lockfile signature" and result.checks[1].outcome.ok
    assert result.checks[1].outcome.reason.startswith("signed by key")


# --- vacuous verdicts -------------------------------------------------------------------------


def test_a_difftest_with_nothing_compared_cannot_pass(locked_pair, tmp_path, monkeypatch):
    from dflash_guard.lossless import local

    real = local.run_difftest

    def empty(options, progress):
        return dataclasses.replace(real(options, progress), results=())

    monkeypatch.setattr(local, "run_difftest", empty)
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = run_gate(GateOptions(lock, write_policy(tmp_path / "p"), locked_pair.roots))
    assert not result.approved and result.checks[-1].name == "difftest"
    assert "cannot tell" in result.reason


def test_policy_show_prints_a_file_policy_check_accepts(cli, tmp_path):
    for name in ("default", "strict", "dev"):
        shown = cli("policy", "show", name)
        assert shown.exit_code == 0
        path = tmp_path / f"{name}.yaml"
        path.write_text(shown.stdout)
        checked = cli("policy", "check", path)  # valid; strict names no signer: exit 1
        assert checked.exit_code == (1 if load_policy(name).unsatisfiable else 0), checked.stderr
        def effective(policy):
            return {k: v for k, v in policy.to_json().items()
                    if k not in ("source", "digest", "name")}

        copy = load_policy(path)
        assert effective(copy) == effective(load_policy(name))
        # a copy's digest is not the built-in's, so neither is its name (issue 36, item 10)
        assert copy.name == f"{name}-copy" and copy.digest != load_policy(name).digest


# --- vacuous verdicts beyond the gate: isolation (N29), sampled (0 dof) ----------------------


def test_an_isolation_diff_without_tenants_cannot_pass():
    from dflash_guard.lossless.isolation import IsolationReport
    from dflash_guard.lossless.result import PromptResult

    identical = (PromptResult("a", None), PromptResult("b", None))
    vacuous = IsolationReport("http://127.0.0.1:1", 0.05, 4, 0, identical)
    assert vacuous.cannot_tell and not vacuous.passed and not vacuous.identical
    assert vacuous.to_json()["cannot_tell"] is True
    tested = IsolationReport("http://127.0.0.1:1", 0.05, 4, 2, identical)
    assert tested.passed and tested.identical and not tested.cannot_tell
    assert not IsolationReport("http://127.0.0.1:1", 0.05, 4, 2, ()).passed


def test_a_sampled_test_with_no_degrees_of_freedom_cannot_pass():
    from dflash_guard.lossless.sampled import HomogeneityTest, SampledPromptResult, SampledReport
    from kernels_ref.sampling import SamplingParams

    flat = HomogeneityTest(0.0, 0, 1.0, 1, 0.0)
    some = HomogeneityTest(1.2, 3, 0.75, 4, 0.1)

    def report(*tests):
        result = SampledPromptResult("p", tests[0], tests[1:], False, None)
        return SampledReport(0.05, 0.01, 50, 2, SamplingParams(), False, (result,))

    assert report(flat, flat, flat).cannot_tell and not report(flat, flat, flat).passed
    assert report(flat, some).passed and not report(flat, some).cannot_tell


def test_verify_approval_refuses_an_edited_file_and_says_what_it_did_not_check(cli, locked_pair,
                                                                                tmp_path):
    private, public = make_key_pair(tmp_path)
    keyed = f"{{identities: [], public_keys: [{public}]}}"
    policy = write_policy(tmp_path / "p", ("  approvals: {identities: [], public_keys: []}",
                                           f"  approvals: {keyed}"))
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    for path in locked_pair.drafter.iterdir():
        (drafter / path.name).write_bytes(path.read_bytes())
    roots = {"target": locked_pair.target, "drafter": drafter}
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    record = tmp_path / "approval.json"
    result = run_gate(GateOptions(lock, policy, roots, out=record,
                                  signing=ApprovalSigning(key=private)))
    assert result.approved, result.reason
    args = ("verify-approval", record, "--policy", policy, "--lock", lock,
            "--root", f"target={locked_pair.target}", "--root", f"drafter={drafter}")
    assert cli(*args).exit_code == 0
    partial = cli(*args[:6])  # a local folder is found only where the operator says
    assert partial.exit_code == 2 and "pass --root target=DIR" in partial.stderr
    assert cli(*args[:6], "--signature-only").exit_code == 0
    assert cli("verify-approval", record, "--policy", "default",
               "--signature-only").exit_code == 1  # another policy, and it accepts no signer
    (drafter / "config.json").write_text((drafter / "config.json").read_text() + " ")
    edited = cli(*args, "--format", "json")
    assert edited.exit_code == 1
    assert json.loads(edited.stdout)["problems"] == [
        "drafter/config.json: size differs from the lock"]


# --- N28: cross-repo remote code is judged by its locked commit ------------------------------


def test_a_code_ref_without_a_revision_is_judged_by_its_commit(locked_pair, tmp_path):
    """The doc's N28: `lock` records no revision for a cross-repo `auto_map` (no flag pins it)
    but always its full commit (the lockfile schema requires it), which is what the gate
    judges; the code's locked sha256 is what `reviewed_code` covers."""
    from dflash_guard.pins.lockfile import CodeRef, LockedFile

    ref = CodeRef("z-lab/code", None, "7" * 40, (LockedFile("modeling.py", 10, "a" * 64),))
    drafter = dataclasses.replace(locked_pair.lock.artifact("drafter"), code_refs=(ref,))
    lock = dataclasses.replace(locked_pair.lock, artifacts=tuple(
        drafter if a.role == "drafter" else a for a in locked_pair.lock.artifacts))
    result = run_gate(GateOptions(write_lock(lock, tmp_path / "dflash.lock"),
                                  write_policy(tmp_path / "p"), locked_pair.roots))
    assert result.checks[0].name == "lockfile" and result.checks[0].outcome.ok, result.reason
