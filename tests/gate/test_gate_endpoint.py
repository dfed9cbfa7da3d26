"""The gate's endpoint step: the policy's `difftest.endpoints` diff two live engines.

Three `kernels_ref.serve` reference engines over the fixture pair: the session's autoregressive
baseline and speculative candidate (`reference_servers`), and, started once for the module, a
candidate with a planted verify bug.
"""

from __future__ import annotations

import json
import socket

import pytest

from dflash_guard.errors import InputError
from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.gate.inputs import EndpointOverrides
from dflash_guard.lossless import endpoint as endpoint_diff
from dflash_guard.lossless.endpoint import run_endpoint_diff
from dflash_guard.trust.policy import load_policy
from tests.support.kernels import drifted_target, swapped_drafter
from tests.support.reference_server import running_server
from tests.support.trust import GATE_PROMPTS, one_line, recorded, write_lock, write_policy

pytestmark = pytest.mark.slow  # reference-server subprocesses, about 3 s each

SECRET = "sk-gate-test-0123456789abcdef"
KEY_ENV = "DFLASH_GATE_TEST_API_KEY"
DIFFTEST = "  near_tie_allowance: 0.0\n"


def endpoints_section(baseline: str, candidate: str, *extra: str) -> str:
    lines = [f"baseline: {baseline}", f"candidate: {candidate}", "prompts: prompts.jsonl",
             "max_new_tokens: 24", *extra]
    return DIFFTEST + "  endpoints:\n" + "".join(f"    {line}\n" for line in lines)


@pytest.fixture(scope="module")
def faulty_server(locked_pair):
    """A speculative candidate with a planted verify bug (accept-off-by-one)."""
    with running_server(locked_pair.target, locked_pair.drafter,
                        inject="accept-off-by-one") as faulty:
        yield faulty


@pytest.fixture
def lock(locked_pair, tmp_path):
    return write_lock(locked_pair.lock, tmp_path / "dflash.lock")


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_gate_endpoint_approves_matching_engines_and_keeps_the_key_secret(
        cli, locked_pair, reference_servers, lock, tmp_path, monkeypatch):
    baseline, candidate = reference_servers.urls
    monkeypatch.setenv(KEY_ENV, SECRET)
    sent_keys = []

    def spy(*args, **kwargs):  # the key reaches the client (tests/endpoint: as a header only)
        sent_keys.append(args[0].candidate.api_key)
        return run_endpoint_diff(*args, **kwargs)

    monkeypatch.setattr(endpoint_diff, "run_endpoint_diff", spy)
    policy = write_policy(tmp_path, (DIFFTEST, endpoints_section(
        baseline, candidate, f"api_key_env: {KEY_ENV}", "metrics: true")))
    out = tmp_path / "approval.json"
    # The key goes only where the operator sends it: the variable and both hosts on the
    # command line (issue 25: a policy names neither).
    result = cli("gate", "--lock", lock, "--policy", policy,
                 "--root", f"target={locked_pair.target}",
                 "--root", f"drafter={locked_pair.drafter}", "--output", out, "--format", "json",
                 "--api-key-env", KEY_ENV, "--baseline", baseline, "--candidate", candidate)
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    step = next(c for c in report["checks"] if c["name"] == "endpoint diff")
    assert step["verdict"] == "passed"
    summary = recorded(out, "endpoint diff")
    assert summary["baseline"] == baseline and summary["candidate"] == candidate
    assert summary["prompts"] == 2 and summary["identical"] is True
    assert summary["hard"] == 0 and summary["near_ties"] == 0
    assert summary["acceptance"]["source"] == "vllm" and summary["acceptance"]["drafts"] > 0
    drafter = recorded(out, "reference diff")["drafter"]  # its metrics: the drafter checked
    assert drafter["passed"] and drafter["engine_tau"] > 1.5
    assert sent_keys == [SECRET]
    for text in (result.stdout, result.stderr, out.read_text(), policy.read_text()):
        assert SECRET not in text


def test_gate_endpoint_refuses_a_faulty_candidate(locked_pair, reference_servers, faulty_server,
                                                  lock, tmp_path):
    baseline, faulty = reference_servers.baseline.url, faulty_server.url
    policy = write_policy(tmp_path, (DIFFTEST, endpoints_section(baseline, faulty)))
    out = tmp_path / "approval.json"
    result = run_gate(GateOptions(lock, policy, locked_pair.roots, out=out))
    assert not result.approved
    assert result.checks[-1].name == "endpoint diff" and not result.checks[-1].outcome.ok
    assert result.checks[-2].name == "difftest" and result.checks[-2].outcome.ok
    assert result.reason.startswith("endpoint diff: 1 of 2 prompts diverge between baseline "
                                    "and candidate (first: loop at token")
    assert not out.exists()


@pytest.mark.parametrize(("max_near_ties", "approved"), [(0, False), (1, True)])
def test_gate_endpoint_near_tie_allowance(locked_pair, reference_servers, faulty_server, lock,
                                          tmp_path, max_near_ties, approved):
    """The planted bug turns prompt `code` into a near-tie only (the runner-up, at a margin
    under 0.1 nats): tolerated up to `max_near_ties`, refused beyond."""
    baseline, faulty = reference_servers.baseline.url, faulty_server.url
    policy = write_policy(tmp_path, (DIFFTEST, endpoints_section(
        baseline, faulty, "near_tie_margin: 0.1", f"max_near_ties: {max_near_ties}")))
    (tmp_path / "prompts.jsonl").write_text(json.dumps(GATE_PROMPTS[0]) + "\n")
    result = run_gate(GateOptions(lock, policy, locked_pair.roots, out=tmp_path / "approval.json"))
    assert result.approved is approved, result.reason
    if approved:
        step = next(c for c in result.checks if c.name == "endpoint diff")
        assert "1 near-ties tolerated" in step.outcome.reason
        summary = recorded(tmp_path / "approval.json", "endpoint diff")
        assert (summary["near_ties"], summary["hard"], summary["identical"]) == (1, 0, False)
    else:
        assert result.reason == ("endpoint diff: 1 near-tie divergences (code), more than the "
                                 "policy's max_near_ties 0")


def test_gate_endpoint_refuses_an_unreachable_candidate(cli, locked_pair, reference_servers, lock,
                                                        tmp_path):
    """A closed port given at gate time (--candidate overrides the policy): refused, exit 1."""
    baseline, candidate = reference_servers.urls
    policy = write_policy(tmp_path, (DIFFTEST, endpoints_section(baseline, candidate)))
    out = tmp_path / "approval.json"
    result = cli("gate", "--lock", lock, "--policy", policy,
                 "--root", f"target={locked_pair.target}",
                 "--root", f"drafter={locked_pair.drafter}", "--output", out,
                 "--candidate", closed_port_url())
    assert result.exit_code == 1, result.stdout + result.stderr
    text = one_line(result.stdout)
    assert "REFUSED: endpoint diff: candidate endpoint" in text and "unreachable" in text
    assert "Traceback" not in result.stdout + result.stderr
    assert not out.exists()


def test_gate_endpoint_not_configured_says_so(cli, locked_pair, lock, tmp_path):
    out = tmp_path / "approval.json"
    result = cli("gate", "--lock", lock, "--policy", write_policy(tmp_path), "--root",
                 f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}",
                 "--output", out)
    assert result.exit_code == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if "endpoint diff" in line)
    assert "not configured" in row and "pass" not in row
    assert recorded(out, "endpoint diff") is None


@pytest.mark.parametrize(("section", "message"), [
    ("  endpoints:\n    baseline: http://a:1\n    candidate: http://b:2\n    api_key: sk-x\n",
     "difftest.endpoints.api_key: unknown field"),
    ("  endpoints:\n    baseline: http://a:1\n    candidate: ftp://b:2\n",
     "difftest.endpoints.candidate: expected an http(s) URL"),
    ("  endpoints:\n    baseline: http://user:sk-x@a:1\n    candidate: http://b:2\n",
     "difftest.endpoints.baseline: expected an http(s) URL without credentials"),
    ("  endpoints:\n    baseline: http://a:1\n    candidate: http://b:2\n    max_near_ties: -1\n",
     "difftest.endpoints.max_near_ties: expected an integer >= 0"),
])
def test_gate_endpoint_schema_errors(tmp_path, section, message):
    policy = write_policy(tmp_path, (DIFFTEST, DIFFTEST + section))
    with pytest.raises(InputError) as error:
        load_policy(policy)
    assert str(error.value).startswith(f"{policy}:")
    assert message in str(error.value)


def test_gate_endpoint_settings_load_with_defaults(tmp_path):
    policy = write_policy(tmp_path, (DIFFTEST, endpoints_section("http://a:1", "http://b:2/v1")))
    rules = load_policy(policy).difftest.endpoints
    assert (rules.baseline, rules.candidate, rules.max_new_tokens) == (
        "http://a:1", "http://b:2/v1", 24)
    assert rules.max_near_ties == 0 and rules.api_key_env is None
    assert rules.metrics  # the drafter check is on unless the policy turns it off (P4)
    assert rules.prompts == str(tmp_path / "prompts.jsonl")
    assert load_policy("default").difftest.endpoints is None


@pytest.mark.parametrize(("args", "message"), [
    (("--baseline", "http://127.0.0.1:1"), "give both --baseline and --candidate"),
    (("--baseline", "file:///etc/passwd", "--candidate", "http://127.0.0.1:1"),
     "--baseline: scheme 'file' is not one of http, https"),
])
def test_gate_endpoint_input_errors_exit_2(cli, lock, tmp_path, args, message):
    result = cli("gate", "--lock", lock, "--policy", write_policy(tmp_path), *args)
    assert result.exit_code == 2
    assert message in one_line(result.stderr)


def test_gate_endpoint_settings_without_urls_take_them_from_the_command_line(cli, lock,
                                                                            tmp_path):
    """Newcomer P4/P6: endpoint settings (here the drafter check turned off) without URLs in
    the policy; the gate then needs both on its command line."""
    policy = write_policy(tmp_path, (DIFFTEST, DIFFTEST + "  endpoints: {metrics: false}\n"))
    rules = load_policy(policy).difftest.endpoints
    assert (rules.baseline, rules.candidate, rules.metrics) == ("", "", False)
    result = cli("gate", "--lock", lock, "--policy", policy, "--baseline", "http://127.0.0.1:1")
    assert result.exit_code == 2
    assert "difftest.endpoints names no candidate URL: give --candidate URL" in one_line(
        result.stderr)


def test_gate_endpoint_unset_api_key_variable_is_an_input_error(cli, lock, tmp_path,
                                                                monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    policy = write_policy(tmp_path, (DIFFTEST, endpoints_section(
        "http://127.0.0.1:1", "http://127.0.0.1:2", f"api_key_env: {KEY_ENV}")))
    result = cli("gate", "--lock", lock, "--policy", policy, "--api-key-env", KEY_ENV,
                 "--baseline", "http://127.0.0.1:1", "--candidate", "http://127.0.0.1:2")
    assert result.exit_code == 2
    assert f"names {KEY_ENV}, but that variable is unset" in one_line(result.stderr)


def test_gate_refuses_a_candidate_serving_a_drifted_target(locked_pair, reference_servers, lock,
                                                           tmp_path):
    """Issue 38 at the gate: the candidate serves the locked target with one matrix scaled by
    1.02 under the same name. Its greedy tokens may agree with the baseline's; the reference
    diff's logprobs against kernels_ref on the locked target do not, so the gate refuses."""
    drifted = drifted_target(locked_pair.target, tmp_path / "drifted")
    baseline = reference_servers.baseline.url
    with running_server(drifted, locked_pair.drafter) as candidate:
        policy = write_policy(tmp_path, (DIFFTEST, endpoints_section(
            baseline, candidate.url, "max_near_ties: 12", "near_tie_margin: 10")))
        result = run_gate(GateOptions(lock, policy, locked_pair.roots,
                                      out=tmp_path / "approval.json"))
    assert not result.approved
    assert [c.name for c in result.checks][-3:] == ["endpoint diff", "rollout", "reference diff"]
    assert result.checks[-3].outcome.ok  # the live diff alone would have passed it
    assert "does not serve the locked target" in result.reason, result.reason
    assert not (tmp_path / "approval.json").exists()


def test_gate_refuses_a_candidate_drafting_with_another_drafter(locked_pair, reference_servers,
                                                                lock, tmp_path):
    """Issue 38's swapped drafter: the candidate serves the locked target with another drafter.
    Lossless, it commits the target's tokens and logprobs; its acceptance counters are held
    against kernels_ref's with the locked drafter, and the gate refuses it at the reference
    diff, naming the drafter. Newcomer P4: by default, with the URLs given at gate time and a
    policy that names no endpoints (nothing turns the drafter check on)."""
    swapped = swapped_drafter(locked_pair.drafter, tmp_path / "swapped")
    baseline = reference_servers.baseline.url
    with running_server(locked_pair.target, swapped) as candidate:
        policy = write_policy(tmp_path)
        result = run_gate(GateOptions(lock, policy, locked_pair.roots,
                                      out=tmp_path / "approval.json",
                                      endpoints=EndpointOverrides(baseline, candidate.url)))
    assert not result.approved and not (tmp_path / "approval.json").exists()
    assert [c.name for c in result.checks if not c.outcome.ok] == ["reference diff"]
    assert result.reason.startswith("reference diff: the candidate does not draft with the "
                                    "locked drafter: the engine does not draft like the locked "
                                    "drafter"), result.reason


def test_a_gate_diffing_endpoints_checks_the_drafter_with_no_url_in_the_policy(
        cli, locked_pair, reference_servers, lock, tmp_path):
    """Newcomer P4 (issue 44): the policy names no endpoints; `--baseline`/`--candidate` on the
    command line are enough for the candidate's acceptance to be held to kernels_ref's with the
    locked drafter (metrics on by default). A swapped drafter is refused; the locked one passes
    with its tau in the row."""
    policy = write_policy(tmp_path, (DIFFTEST, DIFFTEST))
    baseline, candidate = reference_servers.urls
    args = ("gate", "--lock", lock, "--policy", policy, *(a for role, root in
            locked_pair.roots.items() for a in ("--root", f"{role}={root}")),
            "--baseline", baseline, "--format", "json")
    passed = cli(*args, "--candidate", candidate)
    assert passed.exit_code == 0, passed.stdout + passed.stderr
    row = next(c for c in json.loads(passed.stdout)["checks"] if c["name"] == "reference diff")
    assert "drafter: tau" in row["reason"], row
    swapped = swapped_drafter(locked_pair.drafter, tmp_path / "swapped")
    with running_server(locked_pair.target, swapped) as other:
        refused = cli(*args, "--candidate", other.url)
    assert refused.exit_code == 1, refused.stdout + refused.stderr
    assert "does not draft with the locked drafter" in refused.stdout
