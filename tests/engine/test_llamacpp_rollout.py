"""`bench` and `monitor` against llama.cpp: a baseline `llama-server` and a DFlash one on the
built-in pair (f32 GGUF, four slots each), as a rollout check would see them.

`bench` measures each concurrency tier on both servers, reads the candidate's tau from its
`llamacpp:` counters and draws the plot; `monitor` computes tau over one interval from the same
counters while traffic runs. The engine build is part of the suite: a failed build fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dflash_guard.lossless.endpoint import CompletionClient
from dflash_guard.lossless.prompts import read_prompts
from tests.support.llamacpp import build_server, convert, llama_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

BLOCK = 8  # the built-in drafter's block: tau can be at most this


@pytest.fixture(scope="module")
def servers(builtin_pair, tmp_path_factory):
    """(baseline URL, candidate URL) of two llama-servers on the built-in pair."""
    folder = tmp_path_factory.mktemp("rollout")
    target, drafter = builtin_pair.target, builtin_pair.drafter
    target_gguf = convert(target, folder / "target.gguf")
    drafter_gguf = convert(drafter, folder / "drafter.gguf", target_dir=target)
    binary = build_server()
    with llama_server(binary, target_gguf, slots=4) as baseline, \
            llama_server(binary, target_gguf, drafter_gguf, slots=4) as candidate:
        yield baseline.url, candidate.url


def test_bench_reports_each_tier_with_llamacpp_tau_and_draws_the_plot(cli, servers, tmp_path):
    baseline, candidate = servers
    plot = tmp_path / "speedup.png"
    result = cli("bench", "--baseline", baseline, "--candidate", candidate,
                 "--concurrency", "1,2", "--requests", "4", "--max-tokens", "24",
                 "--plot", plot, "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert [tier["concurrency"] for tier in report["tiers"]] == [1, 2]
    for tier in report["tiers"]:
        assert tier["baseline"]["requests"] == tier["candidate"]["requests"] == 4
        assert tier["baseline"]["tokens_per_s"] > 0 and tier["candidate"]["tokens_per_s"] > 0
        assert tier["speedup"] > 0
        assert tier["tau"] is not None and 1.0 <= tier["tau"] <= BLOCK  # llama.cpp's counters
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_monitor_reads_llamacpp_tau_over_an_interval_of_traffic(servers, tmp_path):
    _, candidate = servers
    watcher = subprocess.Popen(
        [sys.executable, "-m", "dflash_guard", "monitor", "--metrics", candidate + "/metrics",
         "--interval", "6", "--once", "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    prompts = read_prompts(Path(__file__).resolve().parents[2] / "kernels_ref" / "prompts"
                           / "default.jsonl")[:3]

    done = threading.Event()

    def traffic() -> None:
        """Requests until the monitor has read its interval (at most 60 s of them), so traffic
        falls inside the interval whenever the monitor's first scrape happens."""
        with CompletionClient("candidate", candidate, timeout=60.0) as client:
            model = client.first_model()
            for _ in range(60):
                for prompt in prompts:
                    if done.is_set():
                        return
                    client.complete(prompt, model=model, max_tokens=24)

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        out, err = watcher.communicate(timeout=120)
    finally:
        done.set()
        sender.join()
    [line] = out.splitlines()
    reading = json.loads(line)
    assert reading["source"] == "llamacpp" and reading["drafts"] > 0, line
    assert reading["tau"] > 1.0 and reading["tau"] <= BLOCK
    alarms = {alarm["kind"] for alarm in reading["alarms"]}
    assert watcher.returncode == (1 if alarms else 0), err
    assert "collapse" not in alarms  # a working drafter on a working engine
