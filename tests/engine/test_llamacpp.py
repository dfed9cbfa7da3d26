"""llama.cpp's DFlash engine (`draft-dflash`), built from the pinned sdist, against our tools.

Per pair (an independent random-weight pair, the built-in weights with the drafter reading
layers [1, 2], and the built-in pair itself once its drafter no longer uses the target's last
layer), converted to f32 GGUF with llama.cpp's own converter:
- baseline llama-server vs DFlash llama-server: identical, and llama.cpp's acceptance counters
  (drafts, per-position accepted) agree with kernels_ref's on the same prompts;
- `difftest reference` of the GGUF baseline server: identical; the record it writes is accepted
  by a policy that requires a GGUF comparison;
- a GGUF with one weight changed: a hard divergence and logprobs that are not the locked
  model's (exit 1); a GGUF whose tokenizer differs:
  refused before any prompt is sent;
- `-np 4` slots with concurrent clients: still identical.

The engine build is part of the suite: when it fails, these tests fail (never skip). Servers
start once per module on free 127.0.0.1 ports and are always stopped.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dflash_guard.gate.checks import gguf_tolerances
from dflash_guard.lossless.local import difftest_models
from dflash_guard.lossless.prompts import load_prompts
from dflash_guard.pins.resolve import build_lock
from dflash_guard.trust.comparison import accepts, read_comparison
from dflash_guard.trust.evidence import comparison_records
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.signing import sign_with_key
from kernels_ref.checkpoint import eos_token_ids
from kernels_ref.fixtures import make_fixture_pair
from kernels_ref.load import load_drafter, load_target
from kernels_ref.tokenizer import load_tokenizer
from tests.support.kernels import random_pair
from tests.support.llamacpp import (
    build_server,
    convert,
    llama_server,
    swap_vocab_entries,
    tamper_one_weight,
)
from tests.support.trust import make_key_pair, write_policy

# `make test` builds the engine first; run alone, the first test may wait for that build
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

MAX_NEW_TOKENS = 24
PROMPTS = [  # token ids (bytes of short texts), so both sides see exactly the same prompt
    list(b"def f(x):"),
    list(b"The quick"),
    list(b"for i in"),
    list(b"total = 0"),
]


def write_prompts(path: Path, prompts: list[list[int]]) -> Path:
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt_ids": ids}) + "\n"
                            for i, ids in enumerate(prompts)))
    return path


@pytest.fixture(scope="module")
def engine() -> Path:
    return build_server()


@pytest.fixture(scope="module", params=["random", "builtin"])
def pair(request, tmp_path_factory):
    """(target, drafter, target.gguf, drafter.gguf, folder) of one pair: `random` (untrained:
    drafts are almost never accepted) or `builtin` (the trained pair, drafter on layers [1, 2],
    so accepted drafts are compared too, not only rejections)."""
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "builtin":
        target, drafter = make_fixture_pair(folder / "hf")
    else:
        target, drafter = random_pair(folder / "hf", seed=12, hidden=64, target_layers=4,
                                      drafter_layers=1, block_size=8, layer_ids=(1, 2))
    gguf = folder / "gguf"
    convert(target, gguf / "target.gguf")
    convert(drafter, gguf / "drafter.gguf", target_dir=target)
    return target, drafter, gguf / "target.gguf", gguf / "drafter.gguf", folder


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    return write_prompts(tmp_path_factory.mktemp("prompts") / "ids.jsonl", PROMPTS)


@pytest.fixture(scope="module")
def servers(engine, pair):
    _, _, target_gguf, drafter_gguf, _ = pair
    with (llama_server(engine, target_gguf) as baseline,
          llama_server(engine, target_gguf, drafter_gguf) as candidate):
        yield baseline, candidate


@pytest.fixture(scope="module")
def endpoint_report(servers, prompt_file):
    """One endpoint diff of the two servers, with llama.cpp's metrics, shared by two tests."""
    import subprocess
    import sys

    baseline, candidate = servers
    done = subprocess.run(
        [sys.executable, "-m", "dflash_guard", "difftest", "endpoint", "--baseline", baseline.url,
         "--candidate", candidate.url, "--metrics", candidate.metrics, "--prompts",
         str(prompt_file), "--max-new-tokens", str(MAX_NEW_TOKENS), "--concurrency", "1",
         "--format", "json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_dflash_server_matches_the_baseline_server(endpoint_report):
    assert endpoint_report["identical"] and endpoint_report["prompts"] == len(PROMPTS)
    assert {r["compared_by"] for r in endpoint_report["results"]} == {"token_ids"}
    acceptance = endpoint_report["acceptance"]
    assert acceptance["source"] == "llamacpp" and acceptance["drafts"] > 0
    assert endpoint_report["response_drafts"]["draft_tokens"] == acceptance["draft_tokens"]


def test_llamacpp_acceptance_agrees_with_kernels_ref(endpoint_report, pair, prompt_file):
    """Same pair, same prompts, same greedy stream (no near-ties: the outputs are identical), so
    the drafts and the drafts accepted at each position agree. The one allowed difference is at
    the end of the budget, where llama.cpp drafts only as many tokens as are left: each prompt's
    last step may accept fewer there (measured on an earlier pair, the old drafter rewired to
    layers [1, 2]: 48 drafts on both sides, accepted per position 14/8/5/4/4/4/4 against
    14/9/5/4/4/4/4, tau 1.90 against 1.92)."""
    target_dir, drafter_dir, _, _, _ = pair
    target = load_target(target_dir)
    drafter = load_drafter(drafter_dir, target)
    tokenizer = load_tokenizer(target_dir)
    prompts = load_prompts(prompt_file, tokenizer, target.config.vocab_size, target_dir)
    report = difftest_models(target, drafter, prompts, stop_ids=eos_token_ids(target_dir),
                             tokenizer=tokenizer, max_new_tokens=MAX_NEW_TOKENS)
    steps_by_accepted = {int(k) - 1: n for k, n in report.histogram.items()}
    steps = sum(steps_by_accepted.values())
    ours = [sum(n for accepted, n in steps_by_accepted.items() if accepted > i)
            for i in range(report.block_size - 1)]
    acceptance = endpoint_report["acceptance"]
    theirs = list(acceptance["accepted_per_position"])
    theirs += [0.0] * (len(ours) - len(theirs))
    slack = len(PROMPTS)  # one truncated last step per prompt
    assert abs(acceptance["drafts"] - steps) <= slack, (acceptance, report.histogram)
    for position, (mine, engine) in enumerate(zip(ours, theirs, strict=True)):
        assert 0 <= mine - engine <= slack, (position, ours, theirs)
    assert acceptance["accepted_tokens"] == sum(theirs)
    tau_gap = (report.block_size - 1) * slack / max(steps, 1)
    assert abs(acceptance["mean_acceptance_length"] - report.tau) <= tau_gap


def test_reference_diff_of_the_gguf_and_its_record(cli, pair, servers, prompt_file, tmp_path):
    target, drafter, target_gguf, _, _ = pair
    record = tmp_path / "comparison.json"
    result = cli("difftest", "reference", "--target", target, "--candidate", servers[0].url,
                 "--gguf", target_gguf, "--prompts", prompt_file, "--max-new-tokens",
                 MAX_NEW_TOKENS,
                 "--record", record, "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["identical"]
    statement = read_comparison(record)
    conversion = statement.predicate["conversion"]
    assert conversion["outtype"] == "f32" and conversion["converter"]["source_sha256"]

    lock = build_lock({"target": str(target), "drafter": str(drafter),
                       "gguf": str(target_gguf.parent)}).lock
    assert accepts(statement, lock).ok
    entry = f"gguf_comparisons:\n  - record: {record}\n"
    private, public = make_key_pair(tmp_path, "approvals")
    signers = ("  approvals: {identities: [], public_keys: []}",
               f"  approvals: {{identities: [], public_keys: [{public}]}}")
    prompts = ("  prompts: prompts.jsonl\n", f"  prompts: {prompt_file}\n")
    policy = load_policy(write_policy(tmp_path / "policy", ("gguf_comparisons: []\n", entry),
                                      signers, prompts))
    assert policy.gguf_requires_comparison
    tolerances = gguf_tolerances(lock, {"gguf": target_gguf.parent})  # f32: measured 0.05
    assert "not signed" in comparison_records(policy, lock, tolerances=tolerances)[1][0]
    sign_with_key(record, private)
    assert comparison_records(policy, lock, tolerances=tolerances) == (
        {target_gguf.name: record.name}, [])


def test_a_tampered_gguf_is_a_hard_divergence(cli, engine, pair, prompt_file, tmp_path):
    target, _, target_gguf, _, _ = pair
    tampered = tmp_path / "tampered.gguf"
    shutil.copy(target_gguf, tampered)
    tamper_one_weight(tampered, "output_norm.weight", 0, 1000.0)
    with llama_server(engine, tampered) as server:
        result = cli("difftest", "reference", "--target", target, "--candidate", server.url,
                     "--gguf", tampered, "--prompts", prompt_file, "--max-new-tokens",
                     MAX_NEW_TOKENS,
                     "--format", "json")
    assert result.exit_code == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "wrong-model" and report["hard"] >= 1  # its logprobs too
    assert report["logprobs"]["max_delta"] > report["logprobs"]["tolerance"]


def test_a_gguf_with_another_tokenizer_is_refused_before_any_diff(cli, pair, prompt_file,
                                                                 tmp_path):
    target, _, _, _, _ = pair
    swapped_dir = swap_vocab_entries(target, tmp_path / "swapped", 97, 98)
    swapped = convert(swapped_dir, tmp_path / "swapped.gguf")
    # nothing listens on port 9: an engine contacted would be an endpoint error (exit 2)
    result = cli("difftest", "reference", "--target", target, "--candidate", "http://127.0.0.1:9",
                 "--gguf", swapped, "--prompts", prompt_file, "--format", "json")
    assert result.exit_code == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "refused" and "id 97" in report["refused"]


def test_parallel_slots_with_concurrent_clients_stay_identical(cli, engine, pair, tmp_path):
    _, _, target_gguf, drafter_gguf, _ = pair
    prompts = write_prompts(tmp_path / "more.jsonl",
                            PROMPTS + [list(b"x = [1, 2,"), list(b"import o"), list(b"while n"),
                                       list(b"# Note:")])
    with (llama_server(engine, target_gguf, slots=4) as baseline,
          llama_server(engine, target_gguf, drafter_gguf, slots=4) as candidate):
        result = cli("difftest", "endpoint", "--baseline", baseline.url, "--candidate",
                     candidate.url,
                     "--prompts", prompts, "--max-new-tokens", MAX_NEW_TOKENS,
                     "--concurrency", "4", "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["identical"] and report["prompts"] == 8
