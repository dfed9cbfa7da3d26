"""docs/engines.md's reference diff against llama.cpp as the page gives it, and the model behind
the endpoint proved by its logprobs.

The built-in pair's target converted to an f32 GGUF with llama.cpp's own converter and served
with the page's flags (`-c 512 -np 4`); `difftest reference --target --candidate --gguf
--record` with nothing else: the shipped prompt set, its two stop-string prompts included, at
the default 64 tokens. Then issue 38's drifted target (one MLP matrix scaled by 1.02, converted
the same way) served as if it were the locked one: the greedy tokens may agree, the logprobs do
not, and the diff refuses it. The locked pair passes with the measured margin.

The engine build is part of the suite: when it fails, these tests fail (never skip).
"""

from __future__ import annotations

import json

import pytest

from dflash_guard.lossless.defaults import DEFAULT_PROMPTS
from dflash_guard.lossless.gguf_precision import gguf_precision
from dflash_guard.lossless.logprob_check import TOLERANCES
from dflash_guard.trust.comparison import read_comparison
from tests.support.kernels import drifted_target
from tests.support.llamacpp import build_server, convert, llama_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

DOCS_FLAGS = {"context": 128, "slots": 4}  # `-c 512 -np 4`: 512 tokens over 4 slots
STOP_PROMPTS = {"stop-newline-in-block", "stop-paren-in-block"}


@pytest.fixture(scope="module")
def ggufs(builtin_pair, tmp_path_factory):
    """(target folder, its f32 GGUF, the drifted target's f32 GGUF)."""
    folder = tmp_path_factory.mktemp("logprobs")
    target = builtin_pair.target
    drifted = drifted_target(target, folder / "drifted")
    return (target, convert(target, folder / "gguf" / "target.gguf"),
            convert(drifted, folder / "gguf" / "drifted.gguf"))


@pytest.fixture(scope="module")
def reports(ggufs, tmp_path_factory):
    """The page's command on the locked GGUF and on the drifted one (exit code, JSON, record)."""
    import subprocess
    import sys

    engine = build_server()
    target, locked, drifted = ggufs
    folder = tmp_path_factory.mktemp("records")
    found = {}
    for name, gguf in (("locked", locked), ("drifted", drifted)):
        record = folder / f"{name}.json"
        with llama_server(engine, gguf, **DOCS_FLAGS) as server:
            done = subprocess.run(
                [sys.executable, "-m", "dflash_guard", "difftest", "reference", "--target",
                 str(target), "--candidate", server.url, "--gguf", str(locked), "--record",
                 str(record), "--format", "json", "--quiet"],
                capture_output=True, text=True, check=False, timeout=900)
        found[name] = (done.returncode, json.loads(done.stdout), read_comparison(record))
    return found


def test_the_documented_command_is_identical_with_its_stop_strings(reports):
    """llama.cpp ignores `stop_token_ids` and decodes past the stop; both decodes are cut at
    their first stop token, so the stop prompts compare the same tokens (a false DIVERGED
    before)."""
    code, report, record = reports["locked"]
    assert code == 0, report
    shipped = DEFAULT_PROMPTS.read_text().splitlines()
    assert report["identical"] and report["prompts"] == len(shipped)
    statuses = {r["prompt_id"]: r["status"] for r in report["results"]}
    assert set(statuses) >= STOP_PROMPTS and {statuses[p] for p in STOP_PROMPTS} == {"identical"}
    assert record.predicate["passed"] and record.predicate["max_new_tokens"] == 64


def test_the_locked_pair_passes_with_the_measured_margin(reports):
    """Measured 0.0204 nats at most over 3,115 values (docs/diff-testing.md): at least twice
    under the float32 tolerance, and the record carries it."""
    _, report, record = reports["locked"]
    logprobs = report["logprobs"]
    assert logprobs["tolerance"] == TOLERANCES["float32"] and logprobs["values"] > 1000
    assert 0 < 2 * logprobs["max_delta"] <= logprobs["tolerance"]
    assert record.predicate["logprobs"]["max_delta"] == logprobs["max_delta"]
    assert record.predicate["logprobs"]["where"] == logprobs["where"]


def test_a_drifted_target_is_refused(reports):
    """One MLP matrix scaled by 1.02 under the locked GGUF's name: not the locked model."""
    code, report, record = reports["drifted"]
    assert code == 1 and report["verdict"] == "wrong-model"
    assert report["hard"] == 0  # the greedy tokens alone would not have refused it
    worst = report["logprobs"]["where"]
    assert worst["delta"] > 2 * report["logprobs"]["tolerance"]
    assert record.predicate["passed"] is False
    assert record.predicate["logprobs"]["max_delta"] == worst["delta"]


@pytest.mark.parametrize(("outtype", "precision"), [("f16", "float16"), ("bf16", "bfloat16"),
                                                    ("q8_0", "q8_0")])
def test_the_tolerance_follows_the_conversions_weight_type(ggufs, tmp_path, outtype, precision):
    """llama.cpp's converter keeps norms in F32 and writes the matrices as asked: the matrices
    name the precision (q8_0 has no measured tolerance: a diff of it needs its own)."""
    target, _, _ = ggufs
    assert gguf_precision(convert(target, tmp_path / "t.gguf", outtype=outtype)) == precision
    _, locked, _ = ggufs
    assert gguf_precision(locked) == "float32"
