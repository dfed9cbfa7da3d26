"""`difftest reference` (an engine against kernels_ref on the safetensors target), its GGUF
comparison record, and a gate whose policy requires a GGUF comparison.

The engine here is `kernels_ref.serve` on the same target (identical by construction; the
fault-injected server diverges); the GGUF is a tokenizer-only file written with the `gguf`
package, enough for the tokenizer check and the record's subject. The real engine, llama.cpp
on a converted GGUF, is in `tests/engine/`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.pins.resolve import build_lock
from dflash_guard.trust.comparison import PREDICATE_TYPE, accepts, read_comparison
from dflash_guard.trust.signing import sign_with_key
from kernels_ref.prompts import DEFAULT_PROMPTS
from tests.support.kernels import drifted_target, random_pair, swapped_drafter
from tests.support.reference_server import running_server
from tests.support.scan_builders import write_vocab_gguf
from tests.support.trust import (
    make_key_pair,
    one_line,
    with_artifact,
    write_lock,
    write_policy,
)

pytestmark = pytest.mark.slow  # a reference-server subprocess, about 3 s

PROMPT_IDS = ("code-function", "math-mean")


def tokenizer_gguf(target: Path, out: Path, *, swap: tuple[int, int] | None = None) -> Path:
    """A GGUF holding only the target's vocabulary (two ids swapped with `swap`)."""

    document = json.loads((target / "tokenizer.json").read_text())
    tokens = {i: t for t, i in document["model"]["vocab"].items()}
    tokens.update({a["id"]: a["content"] for a in document["added_tokens"]})
    vocab = [tokens.get(i, f"[PAD{i}]") for i in range(max(tokens) + 1)]
    if swap is not None:
        a, b = swap
        vocab[a], vocab[b] = vocab[b], vocab[a]
    # llama.cpp refuses BPE without merges: the never-applicable merge of two added tokens
    # that scripts/llamacpp.py writes for a vocabulary with none
    added = [entry["content"] for entry in document["added_tokens"]]
    merges = [m if isinstance(m, str) else " ".join(m) for m in document["model"]["merges"]]
    return write_vocab_gguf(out, vocab, merges=merges or [" ".join(added[:2])])


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    rows = [json.loads(line) for line in DEFAULT_PROMPTS.read_text().splitlines() if line.strip()]
    path = tmp_path_factory.mktemp("prompts") / "subset.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["id"] in PROMPT_IDS))
    return path


@pytest.fixture(scope="module")
def engines(builtin_pair, tmp_path_factory):
    """kernels_ref.serve on the target itself, and on another target with the same tokenizer."""
    target, _ = builtin_pair.target, builtin_pair.drafter
    other, _ = random_pair(tmp_path_factory.mktemp("other"), seed=7)
    with running_server(target) as clean, running_server(other) as wrong:
        yield clean, wrong


@pytest.fixture(scope="module")
def gguf_folder(builtin_pair, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    tokenizer_gguf(builtin_pair.target, folder / "target.gguf")
    return folder


def reference(cli, target, url, prompt_file, *extra):
    return cli("difftest", "reference", "--target", target, "--candidate", url,
               "--prompts", prompt_file, "--max-new-tokens", "12", "--format", "json", *extra)


def test_reference_diff_identical_and_record_written(cli, builtin_pair, engines, prompt_file,
                                                     gguf_folder, tmp_path):
    target, _ = builtin_pair.target, builtin_pair.drafter
    record = tmp_path / "comparison.json"
    result = reference(cli, target, engines[0].url, prompt_file, "--gguf",
                       gguf_folder / "target.gguf", "--record", record)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["identical"] and report["prompts"] == len(PROMPT_IDS)
    assert {r["compared_by"] for r in report["results"]} == {"token_ids"}
    logprobs = report["logprobs"]
    assert logprobs["passed"] and logprobs["values"] > 0
    assert logprobs["max_delta"] <= 1e-3 < logprobs["tolerance"] == 0.05  # float32, measured
    statement = read_comparison(record)
    assert statement.predicate_type == PREDICATE_TYPE
    assert statement.predicate["verdict"] == "identical" and statement.predicate["passed"]
    assert statement.predicate["logprobs"]["max_delta"] == logprobs["max_delta"]
    names = {s.name for s in statement.subjects}
    assert "gguf/target.gguf" in names and "target/model.safetensors" in names


def test_reference_diff_catches_a_wrong_engine(cli, builtin_pair, engines, prompt_file,
                                               tmp_path):
    target, _ = builtin_pair.target, builtin_pair.drafter
    record = tmp_path / "comparison.json"
    result = reference(cli, target, engines[1].url, prompt_file, "--record", record)
    assert result.exit_code == 1, result.stdout
    report = json.loads(result.stdout)
    assert report["hard"] >= 1 and report["verdict"] == "wrong-model"
    assert read_comparison(record).predicate["passed"] is False


def test_a_drifted_target_is_not_the_locked_model(cli, builtin_pair, tmp_path):
    """Issue 38's fault: one MLP matrix scaled by 1.02, same tokenizer and config. Its greedy
    tokens may agree; its logprobs do not, and the record says so."""
    target = builtin_pair.target
    drifted = drifted_target(target, tmp_path / "drifted")
    record = tmp_path / "comparison.json"
    with running_server(drifted) as server:
        result = reference(cli, target, server.url, DEFAULT_PROMPTS, "--record", record)
        text = cli("difftest", "reference", "--target", target, "--candidate", server.url,
                   "--prompts", DEFAULT_PROMPTS, "--max-new-tokens", "12")
    assert result.exit_code == 1, result.stdout
    report = json.loads(result.stdout)
    assert report["verdict"] == "wrong-model" and not report["passed"]
    worst = report["logprobs"]["where"]
    assert report["logprobs"]["max_delta"] == worst["delta"] > report["logprobs"]["tolerance"]
    assert worst["prompt_id"] in {r["prompt_id"] for r in report["results"]}
    assert "not the locked one" in report["wrong_model"]
    predicate = read_comparison(record).predicate
    assert predicate["passed"] is False and predicate["verdict"] == "wrong-model"
    assert predicate["logprobs"]["max_delta"] == worst["delta"]
    assert text.exit_code == 1 and "NOT THE LOCKED MODEL" in text.stdout
    assert "largest difference from kernels_ref" in text.stdout


def test_a_swapped_drafter_is_told_by_its_acceptance(cli, builtin_pair, reference_servers,
                                                    tmp_path):
    """A lossless engine drafting with another drafter commits the target's tokens with the
    target's logprobs: only its acceptance tells. Against kernels_ref's tau with the locked
    drafter, the locked candidate passes and the swapped one is refused, by name."""
    target, drafter = builtin_pair.target, builtin_pair.drafter
    swapped = swapped_drafter(drafter, tmp_path / "swapped")

    def diff(url: str) -> tuple[int, dict]:
        result = reference(cli, target, url, DEFAULT_PROMPTS, "--drafter", drafter,
                           "--metrics", url + "/metrics")
        return result.exit_code, json.loads(result.stdout)

    code, locked = diff(reference_servers.candidate.url)
    assert code == 0 and locked["passed"] and locked["drafter"]["passed"], locked["drafter"]
    # 1.07 measured here at 12 tokens, 1.02 at 64: the engine counts its steps its own way
    assert 0.95 <= locked["drafter"]["ratio"] <= 1.2, locked["drafter"]
    with running_server(target, swapped) as server:
        code, report = diff(server.url)
        text = cli("difftest", "reference", "--target", target, "--candidate", server.url,
                   "--max-new-tokens", "12", "--drafter", drafter, "--metrics",
                   server.url + "/metrics")
    assert text.exit_code == 1 and "NOT THE LOCKED DRAFTER" in one_line(text.stdout)
    assert "kernels_ref's with the locked drafter" in one_line(text.stdout)
    assert code == 1 and report["verdict"] == "wrong-drafter"
    assert report["identical"] and report["logprobs"]["passed"]  # the target's, as promised
    assert report["drafter"]["ratio"] < 0.6, report["drafter"]
    assert report["wrong_drafter"].startswith("the engine does not draft like the locked "
                                              "drafter: its mean acceptance length")


def test_the_drafter_check_needs_the_engines_counters(cli, builtin_pair):
    result = cli("difftest", "reference", "--target", builtin_pair.target, "--candidate",
                 "http://127.0.0.1:9", "--drafter", builtin_pair.drafter)
    assert result.exit_code == 2 and "give --metrics too" in result.stderr


def test_a_precision_never_measured_needs_its_own_tolerance(cli, builtin_pair):
    result = cli("difftest", "reference", "--target", builtin_pair.target, "--candidate",
                 "http://127.0.0.1:9", "--precision", "q4_k")
    assert result.exit_code == 2
    assert "no measured logprob tolerance" in result.stderr and "Traceback" not in result.stderr


def test_reference_diff_refuses_a_gguf_with_another_tokenizer(cli, builtin_pair, engines,
                                                              prompt_file, tmp_path):
    target, _ = builtin_pair.target, builtin_pair.drafter
    swapped = tokenizer_gguf(target, tmp_path / "swapped.gguf", swap=(97, 98))
    result = reference(cli, target, engines[0].url, prompt_file, "--gguf", swapped)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["verdict"] == "refused" and report["prompts"] == 0
    assert "id 97" in report["refused"]


def test_reference_flags_of_other_modes_are_refused(cli, builtin_pair, engines):
    target, _ = builtin_pair.target, builtin_pair.drafter
    result = cli("difftest", "reference", "--target", target, "--candidate", engines[0].url,
                 "--samples", "5")
    assert result.exit_code == 2 and "No such option: --samples" in result.stderr


@pytest.fixture(scope="module")
def gated(builtin_pair, engines, prompt_file, gguf_folder, tmp_path_factory):
    """The fixture pair plus the GGUF folder, locked; a passing and a failing record."""
    from dflash_guard.lossless.endpoint.engine import EngineEndpoint
    from dflash_guard.lossless.options import ReferenceOptions
    from dflash_guard.lossless.reference_diff import run_reference_diff, write_reference_record

    folder = tmp_path_factory.mktemp("gated")
    target, drafter = builtin_pair.target, builtin_pair.drafter
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH_GUARD_CACHE_DIR", str(folder / "cache"))
        lock = build_lock({"target": str(target), "drafter": str(drafter),
                           "gguf": str(gguf_folder)}).lock
    records = {}
    private, _ = make_key_pair(folder, "approvals")  # records count only signed (issue 25)
    (folder / "prompt-set.jsonl").write_bytes(prompt_file.read_bytes())  # the policy's set
    for name, url in (("good", engines[0].url), ("bad", engines[1].url)):
        options = ReferenceOptions(target, EngineEndpoint(url), gguf=gguf_folder / "target.gguf",
                                   prompts=prompt_file, max_new_tokens=12)
        write_reference_record(options, run_reference_diff(options), folder / f"{name}.json")
        records[name] = folder / f"{name}.json"
        sign_with_key(records[name], private)
    return folder, write_lock(lock, folder / "dflash.lock"), lock, records


def gate_with(gated, builtin_pair, gguf_folder, entries: str):
    folder, lock_path, _, _ = gated
    target, drafter = builtin_pair.target, builtin_pair.drafter
    prompts = folder / "prompt-set.jsonl"  # the set the records compared (the gated fixture)
    policy = write_policy(folder / f"policy-{abs(hash(entries))}",
                          ("gguf_comparisons: []\n", f"gguf_comparisons:{entries}\n"),
                          ("  approvals: {identities: [], public_keys: []}",
                           f"  approvals: {{identities: [], public_keys: "
                           f"[{folder / 'approvals.pub'}]}}"),
                          ("  prompts: prompts.jsonl\n", f"  prompts: {prompts}\n"))
    roots = {"target": target, "drafter": drafter, "gguf": gguf_folder}
    return run_gate(GateOptions(lock_path, policy, roots))


def test_gate_approves_with_a_comparison_record_and_refuses_without(gated, builtin_pair,
                                                                    gguf_folder):
    _, _, lock, records = gated
    assert accepts(read_comparison(records["good"]), lock).ok
    approved = gate_with(gated, builtin_pair, gguf_folder, f"\n  - record: {records['good']}")
    assert approved.approved, approved.reason
    refused = gate_with(gated, builtin_pair, gguf_folder, " []")
    assert not refused.approved and "no recorded comparison" in (refused.reason or "")
    failed = gate_with(gated, builtin_pair, gguf_folder, f"\n  - record: {records['bad']}")
    assert not failed.approved and "verdict is 'wrong-model'" in (failed.reason or "")


def _changed(artifact, suffix: str):
    """`artifact` with the digest of its first file ending in `suffix` changed."""
    files = list(artifact.files)
    index = next(i for i, f in enumerate(files) if f.path.endswith(suffix))
    files[index] = dataclasses.replace(files[index], sha256="0" * 64)
    return dataclasses.replace(artifact, files=tuple(files))


def test_a_record_of_another_gguf_or_target_is_not_accepted(gated):
    _, _, lock, records = gated
    statement = read_comparison(records["good"])
    other_gguf = with_artifact(lock, _changed(lock.artifact("gguf"), ".gguf"))
    assert "is none of the locked gguf files" in accepts(statement, other_gguf).reason
    other_target = with_artifact(lock, _changed(lock.artifact("target"), ".safetensors"))
    assert "target/model.safetensors" in accepts(statement, other_target).reason
    no_gguf = dataclasses.replace(lock, artifacts=tuple(a for a in lock.artifacts
                                                        if a.role != "gguf"))
    assert not accepts(statement, no_gguf).ok


@pytest.mark.parametrize(("logprobs", "reason"), [
    (None, "it carries no logprob check"),
    ("absent", "it carries no logprob check"),
    ({"passed": False, "max_delta": 0.2, "tolerance": 0.05}, "its logprobs did not pass"),
    ({"passed": "yes"}, "its logprobs did not pass"),
])
def test_a_passed_record_without_a_passed_logprob_check_is_not_accepted(gated, logprobs, reason):
    """A record from before logprobs were compared (no field), or one whose verdict says passed
    while its logprob check did not: the greedy tokens alone do not prove the locked model."""
    _, _, lock, records = gated
    statement = read_comparison(records["good"])
    assert statement.predicate["logprobs"]["passed"] is True and accepts(statement, lock).ok
    predicate = {k: v for k, v in statement.predicate.items() if k != "logprobs"}
    if logprobs != "absent":
        predicate["logprobs"] = logprobs
    outcome = accepts(dataclasses.replace(statement, predicate=predicate), lock)
    assert not outcome.ok and outcome.reason.startswith(reason), outcome.reason


def test_a_policy_naming_a_missing_record_is_an_input_error(tmp_path):
    from dflash_guard.errors import InputError
    from dflash_guard.trust.policy import load_policy

    policy = write_policy(tmp_path, ("gguf_comparisons: []\n",
                                     "gguf_comparisons:\n  - record: nowhere.json\n"))
    with pytest.raises(InputError, match=r"policy.yaml:\d+: .*nowhere.json not found"):
        load_policy(policy)
