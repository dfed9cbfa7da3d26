"""`dflash-guard difftest endpoint` against `kernels_ref.serve` reference engines.

The baseline decodes autoregressively, the candidate speculatively with the fixture drafter;
both are the session's `reference_servers` (subprocesses on 127.0.0.1 with free ports).
"""

from __future__ import annotations

import json
import os
import signal

import httpx2
import pytest

from kernels_ref.prompts import DEFAULT_PROMPTS
from tests.support.endpoint_fakes import Behaviour, make_app, serve
from tests.support.reference_server import running_server

pytestmark = pytest.mark.slow  # reference-server subprocesses, about 3 s each

# One prompt per fault family, short budgets: enough for every output-changing fault to show.
PROMPT_IDS = ("code-function", "stop-newline-in-block", "mask-token-in-output")
OUTPUT_FAULTS = ("accept-off-by-one", "no-cumprod", "stale-kv", "skip-bonus", "drop-mask-id",
                 "missed-stop")


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    rows = [json.loads(line) for line in DEFAULT_PROMPTS.read_text().splitlines() if line.strip()]
    path = tmp_path_factory.mktemp("prompts") / "subset.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["id"] in PROMPT_IDS))
    return path


def diff(cli, baseline_url, candidate_url, prompt_file, *extra):
    return cli("difftest", "endpoint", "--baseline", baseline_url, "--candidate", candidate_url,
               "--prompts", prompt_file, "--max-new-tokens", "40", "--format", "json", *extra)


def test_endpoint_reference_servers_identical(cli, reference_servers, prompt_file):
    baseline, candidate = reference_servers.baseline, reference_servers.candidate
    result = diff(cli, baseline.url, candidate.url, prompt_file,
                  "--metrics", candidate.url + "/metrics", "--concurrency", "3")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["identical"] and report["prompts"] == len(PROMPT_IDS)
    assert {r["compared_by"] for r in report["results"]} == {"token_ids"}
    acceptance = report["acceptance"]
    assert acceptance["source"] == "vllm" and acceptance["drafts"] > 0
    assert acceptance["mean_acceptance_length"] > 1.0
    assert acceptance["mean_acceptance_length"] < 8.0


@pytest.mark.parametrize("fault", OUTPUT_FAULTS)
def test_endpoint_reference_fault_fails(cli, builtin_pair, reference_servers, prompt_file,
                                        fault):
    baseline = reference_servers.baseline
    target, drafter = builtin_pair.target, builtin_pair.drafter
    with running_server(target, drafter, inject=fault) as faulty:
        result = diff(cli, baseline.url, faulty.url, prompt_file)
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["hard"] >= 1 and not report["passed"]


def test_endpoint_killed_server_is_a_clear_error(cli, builtin_pair, reference_servers,
                                                 prompt_file):
    baseline = reference_servers.baseline
    with running_server(builtin_pair.target) as doomed:
        doomed.process.kill()
        doomed.process.wait()
        result = diff(cli, baseline.url, doomed.url, prompt_file)
    assert result.exit_code == 2
    assert "candidate endpoint" in result.stderr and "unreachable" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_endpoint_hanging_server_times_out(cli, builtin_pair, reference_servers,
                                           prompt_file):
    candidate = reference_servers.candidate
    with running_server(builtin_pair.target) as frozen:
        os.kill(frozen.process.pid, signal.SIGSTOP)  # accepts connections, never answers
        try:
            result = diff(cli, frozen.url, candidate.url, prompt_file, "--timeout", "1")
        finally:
            os.kill(frozen.process.pid, signal.SIGCONT)
    assert result.exit_code == 2
    assert "baseline endpoint" in result.stderr and "no answer within 1 s" in result.stderr


def test_endpoint_malformed_answer_and_secret_key(cli, reference_servers, prompt_file,
                                                  monkeypatch):
    candidate = reference_servers.candidate
    secret = "sk-ref-0c9e44d2b1"
    monkeypatch.setenv("DG_ENGINE_KEY", secret)
    state = Behaviour(malformed=True)
    with serve(make_app(state)) as broken:
        result = diff(cli, candidate.url, broken, prompt_file, "--api-key-env", "DG_ENGINE_KEY")
    assert result.exit_code == 2
    assert "candidate endpoint" in result.stderr and "malformed JSON" in result.stderr
    assert secret not in result.stdout + result.stderr
    assert state.seen_auth and all(a == f"Bearer {secret}" for a in state.seen_auth)


def test_endpoint_cli_modes_are_exclusive(cli, builtin_pair):
    result = cli("difftest", "endpoint", "--baseline", "http://127.0.0.1:9", "--candidate",
                 "http://127.0.0.1:9", "--target", builtin_pair.target)
    assert result.exit_code == 2 and "No such option: --target" in result.stderr
    result = cli("difftest", "endpoint", "--baseline", "http://127.0.0.1:9")
    assert result.exit_code == 2 and "--candidate" in result.stderr


def test_endpoint_reference_server_api(reference_servers):
    baseline, candidate = reference_servers.baseline, reference_servers.candidate
    with httpx2.Client(timeout=30) as http:
        assert http.get(baseline.url + "/health").json() == {"status": "ok"}
        name = http.get(candidate.url + "/v1/models").json()["data"][0]["id"]
        bad = http.post(candidate.url + "/v1/completions", content=b"{not json")
        assert bad.status_code == 400 and "error" in bad.json()
        refused = http.post(candidate.url + "/v1/completions",
                            json={"model": name, "prompt": "x", "stream": True})
        assert refused.status_code == 400
        body = {"model": name, "prompt": "def f(", "max_tokens": 6, "temperature": 0.9,
                "seed": 7, "logprobs": 3, "return_token_ids": True}
        first = http.post(candidate.url + "/v1/completions", json=body).json()["choices"][0]
        again = http.post(candidate.url + "/v1/completions", json=body).json()["choices"][0]
    assert first["token_ids"] == again["token_ids"] and len(first["token_ids"]) == 6
    assert all(len(top) >= 3 for top in first["logprobs"]["top_logprobs"])


def test_endpoint_reference_server_refuses_a_bad_start(tmp_path):
    with pytest.raises(RuntimeError) as refused:  # noqa: SIM117 - the error is raised on entry
        with running_server(tmp_path / "missing"):
            pass
    message = str(refused.value)
    assert "error:" in message and "Traceback" not in message
