"""Issue 15 item 15: endpoint URLs are validated once, at load (`policy check` = the gate)."""

from __future__ import annotations

import pytest

from dflash_guard.urls import is_http_endpoint as endpoint_url
from tests.support.trust import policy_text

DIFFTEST = "  near_tie_allowance: 0.0\n"


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://h:0", "http://h:port",
                                 "http://[::1", "https://user:key@h", "ftp://h", "http://"])
def test_bad_endpoint_urls_are_refused(url):
    assert not endpoint_url(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "https://h", "http://[::1]:65535"])
def test_good_endpoint_urls_pass(url):
    assert endpoint_url(url)


def test_policy_check_refuses_a_port_the_gate_would_reject(cli, tmp_path):
    section = (DIFFTEST + "  endpoints:\n    baseline: http://127.0.0.1:99999\n"
               "    candidate: http://127.0.0.1:8001\n")
    path = tmp_path / "p.yaml"
    path.write_text(policy_text((DIFFTEST, section)))
    result = cli("policy", "check", path)
    assert result.exit_code == 2
    assert "difftest.endpoints.baseline: expected an http(s) URL" in " ".join(result.stderr.split())
