"""The logprob check's parts: the engines' logprobs as parsed, the comparison with the reference's,
the stop cut both decodes get, near-ties judged by the logprobs, and a GGUF's weight precision.

The end-to-end checks (kernels_ref.serve on the locked and on a drifted target) are in
test_reference_diff.py; llama.cpp and vLLM in tests/engine/.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from dflash_guard.errors import InputError
from dflash_guard.lossless.drafter_check import DrafterCheck
from dflash_guard.lossless.endpoint.client import (
    Completion,
    TokenLogprobs,
    parse_chat_completion,
    parse_completion,
)
from dflash_guard.lossless.endpoint.compare import compare_completions, until_stop
from dflash_guard.lossless.gguf_precision import gguf_precision
from dflash_guard.lossless.logprob_check import (
    LogprobCheck,
    compare_prompt,
    is_placeholder,
    tokens_reported,
    tolerance_for,
)
from dflash_guard.lossless.prompts import Prompt
from dflash_guard.lossless.reference_diff import ReferenceDiffReport, _measure_placeholders
from dflash_guard.lossless.result import Divergence, PromptResult
from dflash_guard.near_tie import ENGINE, NEAR_TIE_MARGIN, judge_near_tie


def test_vllm_completions_logprobs_are_read():
    payload = {"choices": [{"text": "ab", "token_ids": [97, 98], "finish_reason": "length",
                            "logprobs": {"tokens": ["token_id:97", "token_id:98"],
                                         "token_logprobs": [-0.5, -0.25],
                                         "top_logprobs": [{"token_id:97": -0.5,
                                                           "token_id:99": -1.5},
                                                          {"token_id:98": -0.25}]}}]}
    completion = parse_completion(payload)
    assert [p.logprob for p in completion.logprobs] == [-0.5, -0.25]
    assert completion.at(0).top == ((97, -0.5), (99, -1.5)) and completion.at(0).margin == 1.0


def test_vllm_chat_logprobs_are_read():
    payload = {"choices": [{"message": {"content": "a"}, "finish_reason": "stop",
                            "logprobs": {"content": [
                                {"token": "token_id:97", "logprob": -0.125,
                                 "top_logprobs": [{"token": "token_id:97", "logprob": -0.125},
                                                  {"token": "token_id:98", "logprob": -2.0}]}]}}]}
    completion = parse_chat_completion(payload)
    assert completion.token_ids == (97,)
    assert completion.logprobs == (TokenLogprobs(-0.125, ((97, -0.125), (98, -2.0))),)


def test_llamacpp_logprobs_follow_the_ids_they_belong_to():
    """llama.cpp leaves out the logprobs of a token that ends inside a UTF-8 character: that
    position has none, the next one keeps its own."""
    content = [{"id": 97, "token": "a", "logprob": -0.1, "top_logprobs": [
                   {"id": 97, "token": "a", "logprob": -0.1}]},
               {"id": 98, "token": "b", "logprob": -0.2, "top_logprobs": []}]
    payload = {"choices": [{"text": "a\ufffdb", "logprobs": {"content": content},
                            "finish_reason": "length"}],
               "__verbose": {"tokens": [97, 226, 98]}}
    completion = parse_completion(payload)
    assert completion.token_ids == (97, 226, 98)
    assert [p.logprob for p in completion.logprobs] == [-0.1, None, -0.2]
    assert completion.at(1) == TokenLogprobs() and completion.at(3) == TokenLogprobs()


def answer(ids, chosen, tops=None):
    tops = tops or [() for _ in ids]
    return Completion("", tuple(ids), None,
                      tuple(TokenLogprobs(c, t) for c, t in zip(chosen, tops, strict=True)),
                      "length")


def test_the_largest_difference_and_where_it_is():
    engine = answer([5, 6], [-0.1, -0.2], [((5, -0.1), (7, -3.0)), ((6, -0.2),)])
    assert tokens_reported(engine) == [{5, 7}, {6}]
    reference = [{5: -0.1, 7: -3.5}, {6: -0.2001}]
    prompt = compare_prompt("p", engine, reference)
    assert prompt.values == 3 and prompt.compared_positions == 2
    assert prompt.worst is not None
    assert (prompt.worst.position, prompt.worst.token, prompt.worst.committed) == (0, 7, False)
    assert prompt.worst.delta == pytest.approx(0.5)
    check = LogprobCheck(0.25, "test", (prompt,))
    assert not check.passed and "position 0 the logprob of token 7" in (check.reason() or "")
    assert LogprobCheck(1.0, "test", (prompt,)).passed


def test_positions_the_reference_cannot_see_are_not_compared():
    """Past the target's context (or after an id outside its vocabulary) there is no reference
    row: those positions are left out, not an error."""
    prompt = compare_prompt("p", answer([5, 6, 7], [-0.1, -0.2, -0.3]), [{5: -0.1}])
    assert prompt.positions == 1 and prompt.values == 1 and prompt.max_delta == 0


def test_a_value_that_is_not_a_number_fails_the_check():
    prompt = compare_prompt("p", answer([5], [math.nan]), [{5: -0.1}])
    assert prompt.max_delta == math.inf
    assert not LogprobCheck(10.0, "test", (prompt,)).passed


def test_an_engine_that_reports_no_logprobs_proves_nothing():
    prompt = compare_prompt("p", answer([5, 6], [None, None]), [{5: -0.1}, {6: -0.1}])
    check = LogprobCheck(1.0, "test", (prompt,))
    assert prompt.values == 0 and not check.passed
    assert "cannot be shown to serve the locked model" in (check.reason() or "")


def test_a_placeholder_logprob_is_not_a_measurement():
    """llama.cpp's speculative path commits every token it accepts with probability 1 and no
    top-k: those positions are not compared, and the check cannot pass with them; a computed
    logprob of 0 comes with its alternatives and is compared."""
    engine = answer([5, 6, 7], [-0.1, 0.0, 0.0], [((5, -0.1), (8, -2.0)), (), ((7, 0.0),)])
    prompt = compare_prompt("p", engine, [{5: -0.1, 8: -2.0}, {6: -1.5}, {7: 0.0}])
    assert (prompt.placeholders, prompt.compared_positions, prompt.values) == (1, 2, 3)
    assert prompt.max_delta == 0  # position 1's 1.5 nats were never measured by the engine
    check = LogprobCheck(0.05, "test", (prompt,))
    assert not check.passed and check.to_json()["placeholders"] == 1
    assert (check.reason() or "").startswith("the engine measured no logprob at 1 of the 3 "
                                             "positions it committed")
    honest = compare_prompt("p", answer([5], [0.0], [((5, 0.0),)]), [{5: 0.0}])
    assert LogprobCheck(0.05, "test", (honest,)).passed


class OneTokenEngine:
    """An engine's one-token answers: `tokens[context length]` with logprob -0.5 and a top-2."""

    def __init__(self, tokens):
        self.tokens, self.asked = tokens, []

    def complete(self, spec, *, model, max_tokens):
        self.asked.append((len(spec.prompt), max_tokens))
        token = self.tokens[len(spec.prompt)]
        return answer([token], [-0.5], [((token, -0.5), (1, -1.0))])


def test_placeholders_are_measured_on_one_token_requests():
    """Each placeholder position is asked again alone (the prompt and the engine's tokens
    before it, one token): its measurement replaces the placeholder; one whose token is not
    the committed one, or past the target's context, stays a placeholder."""
    prompt = Prompt("p", (9, 9))
    committed = [5, 6, 7, 8]  # position 2: the engine's own answer there is another token
    decoded = answer(committed, [-0.1, 0.0, 0.0, 0.0], [((5, -0.1),), (), (), ()])
    engine = OneTokenEngine([9, 9, 5, 6, 4, 8])
    [filled], measured = _measure_placeholders(engine, "m", [prompt], [decoded], frozenset(),
                                               room=5, concurrency=2)
    assert sorted(engine.asked) == [(3, 1), (4, 1)] and measured == 1  # position 3: no room
    assert [p.logprob for p in filled.logprobs] == [-0.1, -0.5, 0.0, 0.0]
    assert filled.at(1).top == ((6, -0.5), (1, -1.0))
    assert [is_placeholder(filled, i) for i in range(4)] == [False, False, True, True]


def test_both_decodes_end_at_their_first_stop_token():
    """kernels_ref stops at the stop token and emits it; llama.cpp ignores `stop_token_ids` and
    decodes on to the budget: cut, both are the same tokens."""
    stops = frozenset({10})
    reference = answer([1, 2, 10], [0, 0, 0])
    decoded_on = answer([1, 2, 10, 3, 4], [-1, -2, -3, -4, -5])
    assert until_stop(reference, stops).token_ids == (1, 2)
    cut = until_stop(decoded_on, stops)
    assert cut.token_ids == (1, 2) and [p.logprob for p in cut.logprobs] == [-1, -2]
    assert until_stop(answer([1, 2], [0, 0]), stops).token_ids == (1, 2)


def test_a_near_tie_is_benign_only_where_the_logprobs_agree():
    """The reference's runner-up taken at a small margin is a near-tie only where the engine's
    logprobs up to it agree with the reference's: decided once, in `judge_near_tie`."""
    engine = answer([5, 6], [-0.7, -0.69], [((5, -0.7), (6, -0.71)), ()])
    reference = answer([5, 5], [0, 0], [((5, -0.7), (6, -0.71)), ((5, -0.7), (6, -0.701))])

    def judged(logprobs):
        return compare_completions("p", reference, engine, compare_text=False,
                                   logprobs_agree=partial(logprobs.within, tolerance=1e-3))

    agreeing = compare_prompt("p", engine, [{5: -0.7, 6: -0.7099}, {6: -0.69}])
    assert judged(agreeing).status == "near-tie"
    assert "the logprobs agree" in judged(agreeing).divergence.detail
    disagreeing = compare_prompt("p", engine, [{5: -0.7, 6: -0.75}, {6: -0.69}])
    assert judged(disagreeing).status == "hard"
    assert "not the reference's" in judged(disagreeing).divergence.detail
    unreported = compare_prompt("p", engine, [{5: -0.7, 6: -0.7099}])  # none at position 1
    assert judged(unreported).status == "hard"


def test_near_ties_are_decided_by_one_rule():
    """A small margin where the candidate took the runner-up is a near-tie; a small margin on
    another token, a margin at the threshold, or none at all is not."""
    assert judge_near_tie(0.01, NEAR_TIE_MARGIN[ENGINE]) == (
        True, "candidate took the baseline's runner-up at margin 0.0100 nats")
    assert not judge_near_tie(0.01, 0.05, took_runner_up=False)[0]
    assert judge_near_tie(0.05, 0.05) == (False, "")
    assert not judge_near_tie(None, 0.05)[0]
    assert not judge_near_tie(0.01, 0.05, logprobs_agree=False)[0]
    assert NEAR_TIE_MARGIN["float32"] < NEAR_TIE_MARGIN["float16"] < NEAR_TIE_MARGIN["bfloat16"]


def test_one_verdict_ladder_for_the_report_and_the_gate():
    """Refused, wrong model, wrong drafter, diverged, then near-ties or identical: the first
    rung that holds is the verdict, its `passed` and the outcome the gate and `launch` give."""
    same, hard = PromptResult("p", None), PromptResult("p", Divergence(1, 5, 6, 0.5))
    agreed = LogprobCheck(0.05, "test", (compare_prompt("p", answer([5], [-0.5]),
                                                        [{5: -0.5}]),))
    drifted = LogprobCheck(0.05, "test", (compare_prompt("p", answer([5], [-0.5]),
                                                         [{5: -0.9}]),))

    def report(**fields):
        return ReferenceDiffReport("t", "http://c", None, 0.05, "p.jsonl", "0" * 64, 8,
                                   **fields)

    ladder = [
        (report(), "refused", "cannot tell: no prompt was compared"),
        (report(results=(same,)), "refused", "cannot tell"),  # no logprobs checked
        (report(results=(hard,), logprobs=drifted), "wrong-model",
         "the candidate does not serve the locked target: the served model is not"),
        (report(results=(hard,), logprobs=agreed, drafter=DrafterCheck(3.0, 1.0)),
         "wrong-drafter", "the candidate does not draft with the locked drafter"),
        (report(results=(hard,), logprobs=agreed), "diverged",
         "the candidate diverges from kernels_ref on the locked target: diverged (first: p)"),
        (report(results=(same,), logprobs=agreed), "identical", "1 prompts match kernels_ref"),
    ]
    for diff, verdict, reason in ladder:
        outcome = diff.outcome("the candidate", "; no drafter")
        assert diff.verdict == verdict and diff.to_json()["verdict"] == verdict
        assert diff.passed is (verdict == "identical") and outcome.reason.startswith(reason)
        assert outcome.ok is diff.passed


def test_only_measured_precisions_have_a_tolerance():
    assert tolerance_for("float32") < tolerance_for("bfloat16")
    with pytest.raises(InputError, match="no measured logprob tolerance"):
        tolerance_for("q4_k")


def write_gguf(path, matrices):
    from gguf import GGMLQuantizationType, GGUFWriter

    writer = GGUFWriter(str(path), "qwen3")
    writer.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    for name, (array, kind) in matrices.items():
        writer.add_tensor(name, array, raw_dtype=GGMLQuantizationType[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_ggufs_precision_is_its_matrices(tmp_path):
    f32 = np.ones((8, 8), dtype=np.float32)
    f16 = np.ones((8, 8), dtype=np.float16)
    assert gguf_precision(write_gguf(tmp_path / "a.gguf", {"blk.0.w": (f32, "F32")})) == "float32"
    mixed = write_gguf(tmp_path / "b.gguf", {"token_embd.weight": (f32, "F32"),
                                               "blk.0.w": (f16, "F16")})
    assert gguf_precision(mixed) == "float16"
    assert gguf_precision(write_gguf(tmp_path / "c.gguf", {})) is None
