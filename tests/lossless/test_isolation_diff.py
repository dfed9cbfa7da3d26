"""`difftest isolation` against kernels_ref.serve: clean it passes; with the planted
cross-request fault (`prefix-cache-first-block`) it fails, while the ordinary endpoint diff
against a clean baseline misses that fault (each prompt there is the only one opening its way)."""

from __future__ import annotations

import json

import pytest

from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.isolation import IsolationOptions, tenant_of
from kernels_ref.faults import Fault
from kernels_ref.prompts import PromptSpec
from tests.support.reference_server import running_server

FAULT = Fault.PREFIX_CACHE_FIRST_BLOCK


def isolation(cli, url: str, *extra: str):
    return cli("difftest", "isolation", "--candidate", url, "--max-new-tokens", "8",
               "--format", "json", *extra)


def test_isolation_clean_engine_is_identical(cli, builtin_pair):
    target, drafter = builtin_pair.target, builtin_pair.drafter
    with running_server(target, drafter) as clean:
        result = isolation(cli, clean.url)
    assert result.exit_code == 0, result.stderr + result.stdout
    report = json.loads(result.stdout)
    assert report["mode"] == "isolation" and report["identical"]
    assert report["tenants"] >= 5 and report["prompts"] == len(report["results"])
    n = report["prompts"]  # progress on stderr: the solo runs, then the runs among tenants
    assert f"each prompt alone: {n}/{n} prompts (" in result.stderr
    assert f"among {report['tenants']} tenants: done (" in result.stderr


def test_isolation_catches_the_cross_request_fault_the_plain_diff_misses(cli, builtin_pair):
    target, drafter = builtin_pair.target, builtin_pair.drafter
    with running_server(target) as baseline, running_server(target, drafter,
                                                             inject=str(FAULT)) as faulty:
        plain = cli("difftest", "endpoint", "--baseline", baseline.url, "--candidate", faulty.url,
                    "--max-new-tokens", "8", "--format", "json")
        assert plain.exit_code == 0, plain.stderr  # one tenant never sees it
        assert json.loads(plain.stdout)["identical"]
        caught = isolation(cli, faulty.url)
    assert caught.exit_code == 1, caught.stderr + caught.stdout
    report = json.loads(caught.stdout)
    hard = {r["prompt_id"] for r in report["results"] if r["status"] == "hard"}
    assert "code-function" in hard and report["hard"] == len(hard)


def test_tenant_shares_a_long_prefix_and_then_differs():
    prompt = PromptSpec("p", "def binary_search(items, target):\n    lo, hi = 0, len(items)\n")
    tenant = tenant_of(prompt)
    assert tenant is not None and tenant.id == "p~tenant"
    assert isinstance(tenant.prompt, str) and tenant.prompt != prompt.prompt
    assert len(tenant.prompt) == len(prompt.prompt)
    shared = int(len(prompt.prompt) * 0.75)
    assert tenant.prompt[:shared] == prompt.prompt[:shared]
    ids = PromptSpec("q", tuple(range(20)))
    assert tenant_of(ids).prompt[:15] == tuple(range(15))  # type: ignore[union-attr]
    assert tenant_of(PromptSpec("short", "d")) is None


@pytest.mark.parametrize("flags, message", [
    (["--candidate", "http://127.0.0.1:9", "--concurrency", "1"], "--concurrency"),
    (["--candidate", "http://127.0.0.1:9", "--inject", str(FAULT)], "No such option"),
    (["--candidate", "http://127.0.0.1:9", "--metrics", "http://127.0.0.1:9/m"],
     "No such option"),
    ([], "--candidate"),
])
def test_isolation_flags_of_other_modes_are_refused(cli, flags, message):
    result = cli("difftest", "isolation", *flags)
    assert result.exit_code == 2
    assert message in result.stderr


def test_serve_fault_is_refused_by_the_local_runner(cli, builtin_pair):
    target, drafter = builtin_pair.target, builtin_pair.drafter
    result = cli("difftest", "local", "--target", str(target), "--drafter", str(drafter),
                 "--inject", str(FAULT))
    assert result.exit_code == 2 and "difftest isolation" in result.stderr


def test_isolation_options_check_the_engine():
    with pytest.raises(Exception, match="http"):
        EngineEndpoint("ftp://example")
    with pytest.raises(Exception, match="at least 2"):
        IsolationOptions(EngineEndpoint("http://127.0.0.1:9"), concurrency=1)
