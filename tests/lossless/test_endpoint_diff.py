"""The endpoint diff client against fake OpenAI-compatible engines (no kernels_ref involved)."""

from __future__ import annotations

import json
import socket

import pytest

from dflash_guard.errors import InputError
from dflash_guard.lossless.endpoint import (
    EndpointError,
    EndpointOptions,
    acceptance_from_metrics,
    acceptance_warnings,
    completions_url,
    parse_completion,
    parse_prometheus,
    read_api_key,
    redact_url,
    run_endpoint_diff,
)
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.endpoint.metrics import metrics_cannot_tell
from dflash_guard.lossless.prompts import read_prompts
from dflash_guard.progress import NO_PROGRESS
from kernels_ref.prompts import PromptSpec
from tests.support.endpoint_fakes import text_choice, vllm_choice
from tests.support.progress import Recorder

PROMPTS = [PromptSpec("a", "alpha"), PromptSpec("b", "beta")]
FAST = dict(timeout=5.0, retries=3, backoff=0.01)


def both(pair, prompt: str, base_choice: dict, cand_choice: dict | None = None) -> None:
    pair.baseline.choices[prompt] = base_choice
    pair.candidate.choices[prompt] = cand_choice or base_choice


ENGINE_FIELDS = {"model", "api_key", "timeout", "retries", "backoff"}


def run(pair, prompts=PROMPTS, *, metrics_url=None, progress=NO_PROGRESS, **kwargs):
    """The endpoint diff of `pair` with engine settings (`ENGINE_FIELDS`) given to both engines
    and `metrics_url` to the candidate; the other keywords are the diff's own options."""
    settings = {**FAST, **kwargs}
    engine = {k: v for k, v in settings.items() if k in ENGINE_FIELDS}
    own = {k: v for k, v in settings.items() if k not in ENGINE_FIELDS}
    options = EndpointOptions(EngineEndpoint(pair.baseline_url, **engine),
                              EngineEndpoint(pair.candidate_url, **engine,
                                             metrics_url=metrics_url), **own)
    return run_endpoint_diff(options, prompts, progress)


def test_endpoint_identical_outputs_pass(fake_pair):
    both(fake_pair, "alpha", vllm_choice([5, 6, 7]))
    both(fake_pair, "beta", vllm_choice([8, 9]))
    prompts = [PromptSpec("a", "alpha", 4, (".", 7)), PromptSpec("b", "beta", 99)]
    report = run(fake_pair, prompts=prompts, max_new_tokens=8)
    assert report.identical and report.passed
    assert [r.compared_by for r in report.results] == ["token_ids", "token_ids"]
    body = next(b for b in fake_pair.baseline.seen_bodies if b["prompt"] == "alpha")
    assert (body["stop"], body["stop_token_ids"], body["max_tokens"]) == (["."], [7], 4)
    beta = next(b for b in fake_pair.candidate.seen_bodies if b["prompt"] == "beta")
    assert beta["max_tokens"] == 8  # the run's cap wins over the prompt's own budget
    assert body["temperature"] == 0 and body["logprobs"] == 5 and body["model"] == "fake-model"
    assert body["return_tokens_as_token_ids"] is True and body["return_token_ids"] is True


def test_endpoint_stop_token_ids_mean_the_same_on_every_engine(fake_pair):
    """vLLM stops at a `stop_token_ids` token; llama.cpp ignores the field and decodes on: both
    are cut at their first stop token, so the same decode is identical, a different one before
    the stop still diverges."""
    prompts = [PromptSpec("a", "alpha", 8, (7,)), PromptSpec("b", "beta", 8, (7,))]
    both(fake_pair, "alpha", vllm_choice([5, 6, 7], finish="stop"), vllm_choice([5, 6, 7, 3, 4]))
    both(fake_pair, "beta", vllm_choice([5, 6, 7], finish="stop"), vllm_choice([5, 9, 7, 3]))
    report = run(fake_pair, prompts=prompts)
    first, second = report.results
    assert first.identical and first.candidate_length == first.reference_length == 2
    assert second.status == "hard" and second.divergence.position == 1


def test_endpoint_near_tie_is_counted_not_failed(fake_pair):
    both(fake_pair, "alpha", vllm_choice([5, 6, 7]))
    tops = {1: {6: -0.70, 9: -0.72}}
    flipped = vllm_choice([5, 9, 1], {1: {9: -0.7, 6: -0.71}})
    both(fake_pair, "beta", vllm_choice([5, 6, 7], tops), flipped)
    report = run(fake_pair, near_tie_margin=0.05)
    beta = report.results[1]
    assert beta.status == "near-tie"
    tie = beta.divergence
    assert (tie.position, tie.reference_token, tie.candidate_token) == (1, 6, 9)
    assert tie.margin == pytest.approx(0.02)
    assert report.passed and not report.identical and len(report.near_ties) == 1
    # A tighter threshold turns the same divergence into a hard one.
    assert not run(fake_pair, near_tie_margin=0.01).passed


def test_endpoint_hard_divergence_fails(fake_pair):
    confident = vllm_choice([5, 6, 7], {2: {7: -0.1, 3: -3.0}})
    both(fake_pair, "alpha", confident, vllm_choice([5, 6, 3]))
    both(fake_pair, "beta", vllm_choice([8, 9]))
    report = run(fake_pair)
    alpha = report.results[0]
    assert alpha.status == "hard"
    bug = alpha.divergence
    assert (bug.position, bug.reference_token, bug.candidate_token) == (2, 7, 3)
    assert bug.margin == pytest.approx(2.9)
    assert not report.passed
    assert report.to_json()["hard"] == 1


def test_endpoint_small_margin_to_a_third_token_is_hard(fake_pair):
    tops = {0: {5: -1.0, 6: -1.01, 7: -1.02}}
    both(fake_pair, "alpha", vllm_choice([5], tops), vllm_choice([7]))
    both(fake_pair, "beta", vllm_choice([1]))
    result = run(fake_pair).results[0]
    assert result.status == "hard" and "runner-up" in result.divergence.detail


def test_endpoint_candidate_ending_early_is_hard(fake_pair):
    both(fake_pair, "alpha", vllm_choice([5, 6, 7]), vllm_choice([5, 6], finish="stop"))
    both(fake_pair, "beta", vllm_choice([1]))
    result = run(fake_pair).results[0]
    assert result.status == "hard"
    assert (result.divergence.position, result.divergence.candidate_token) == (2, None)


def test_endpoint_falls_back_to_token_text_then_text(fake_pair):
    both(fake_pair, "alpha", text_choice(["He", "llo"]), text_choice(["He", "lp"]))
    both(fake_pair, "beta", {"index": 0, "text": "same", "logprobs": None})
    report = run(fake_pair, token_ids=False)
    assert "return_token_ids" not in fake_pair.candidate.seen_bodies[0]
    alpha, beta = report.results
    assert alpha.compared_by == "token_texts"
    assert (alpha.divergence.position, alpha.divergence.candidate_token) == (1, "lp")
    assert (beta.compared_by, beta.status) == ("text", "identical")


def test_endpoint_retries_429_then_succeeds(fake_pair):
    both(fake_pair, "alpha", vllm_choice([1]))
    fake_pair.candidate.statuses = [429, 503, 429]
    report = run(fake_pair, prompts=PROMPTS[:1])
    assert report.identical
    assert len(fake_pair.candidate.seen_bodies) == 4


def test_endpoint_gives_up_after_bounded_retries(fake_pair):
    both(fake_pair, "alpha", vllm_choice([1]))
    fake_pair.candidate.always_status = 503
    with pytest.raises(EndpointError, match="candidate endpoint .*HTTP 503"):
        run(fake_pair, prompts=PROMPTS[:1], retries=2)
    assert len(fake_pair.candidate.seen_bodies) == 3


def test_endpoint_malformed_json_is_a_clear_error(fake_pair):
    both(fake_pair, "alpha", vllm_choice([1]))
    fake_pair.baseline.malformed = True
    with pytest.raises(EndpointError, match="baseline endpoint .*malformed JSON"):
        run(fake_pair, prompts=PROMPTS[:1])


def test_endpoint_reports_each_request_the_engines_answered(fake_pair):
    both(fake_pair, "alpha", vllm_choice([5, 6]))
    both(fake_pair, "beta", vllm_choice([8]))
    recorder = Recorder()
    run(fake_pair, progress=recorder)
    (asked,) = recorder.stages
    assert (asked.name, asked.total, asked.unit, asked.amounts, asked.ended) == (
        "asking both engines", 4, "requests", [1, 1, 1, 1], True)


def test_endpoint_failure_still_ends_its_stage(fake_pair):
    both(fake_pair, "alpha", vllm_choice([1]))
    fake_pair.baseline.malformed = True
    recorder = Recorder()
    with pytest.raises(EndpointError):
        run(fake_pair, prompts=PROMPTS[:1], progress=recorder)
    # the candidate's answer may count before the baseline's failure is seen
    assert [(s.name, s.ended) for s in recorder.stages] == [("asking both engines", True)]


def test_endpoint_json_without_choices_is_a_clear_error(fake_pair):
    both(fake_pair, "alpha", vllm_choice([1]))
    fake_pair.candidate.no_choices = True
    with pytest.raises(EndpointError, match="malformed completion for prompt 'a'"):
        run(fake_pair, prompts=PROMPTS[:1])


def test_endpoint_hanging_server_times_out(fake_pair):
    both(fake_pair, "alpha", vllm_choice([1]))
    fake_pair.candidate.hang_s = 4.0
    with pytest.raises(EndpointError, match="no answer within 0.5 s"):
        run(fake_pair, prompts=PROMPTS[:1], timeout=0.5)


def test_endpoint_unreachable_is_a_clear_error():
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    # both engines are asked at once: whichever refuses first is the one named
    with pytest.raises(EndpointError, match="(baseline|candidate) endpoint .* unreachable"):
        engine = EngineEndpoint(url, model="m", **FAST)
        run_endpoint_diff(EndpointOptions(engine, engine), PROMPTS)


def test_endpoint_concurrency_is_bounded(fake_pair):
    prompts = [PromptSpec(str(i), f"p{i}") for i in range(12)]
    for p in prompts:
        both(fake_pair, p.prompt, vllm_choice([1, 2]))
    fake_pair.baseline.delay_s = 0.05
    report = run(fake_pair, prompts=prompts, concurrency=3)
    assert report.identical and len(report.results) == 12
    assert 2 <= fake_pair.baseline.max_in_flight <= 3


def test_endpoint_api_key_sent_but_never_reported(fake_pair, monkeypatch):
    secret = "sk-test-7f3a9c1d"
    monkeypatch.setenv("DG_TEST_KEY", secret)
    fake_pair.baseline.require_key = fake_pair.candidate.require_key = secret
    both(fake_pair, "alpha", vllm_choice([1, 2]), vllm_choice([1, 3]))
    report = run(fake_pair, prompts=PROMPTS[:1], api_key=read_api_key("DG_TEST_KEY"))
    assert fake_pair.baseline.seen_auth[0] == f"Bearer {secret}"
    assert secret not in json.dumps(report.to_json()) and secret not in repr(report)
    # A refused key: the error names the endpoint, never the key.
    fake_pair.candidate.require_key = "another"
    with pytest.raises(EndpointError) as refused:
        run(fake_pair, prompts=PROMPTS[:1], api_key=secret)
    assert "refused the credentials" in str(refused.value) and secret not in str(refused.value)


def test_the_engine_type_never_shows_its_key(monkeypatch):
    """One `EngineEndpoint` holds the key for every command, bench included (whose options used
    to show it in their repr); it names the variable the key came from instead."""
    from dflash_guard.rollout.bench import BenchOptions

    monkeypatch.setenv("DG_TEST_KEY", "sk-test-7f3a9c1d")
    engine = EngineEndpoint.from_env("http://127.0.0.1:9", api_key_env="DG_TEST_KEY")
    assert engine.api_key == "sk-test-7f3a9c1d" and engine.key_source == "DG_TEST_KEY"
    options = BenchOptions(engine, engine, PROMPTS)
    assert "sk-test" not in repr(engine) and "sk-test" not in repr(options)
    assert "DG_TEST_KEY" in repr(engine)


def test_endpoint_api_key_env_must_be_set(monkeypatch):
    monkeypatch.delenv("DG_MISSING_KEY", raising=False)
    with pytest.raises(InputError, match="DG_MISSING_KEY"):
        read_api_key("DG_MISSING_KEY")
    assert read_api_key(None) is None


VLLM_BEFORE = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 150
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 40
"""
VLLM_AFTER = """vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 30
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 10
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 450
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 150
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 130
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 40
"""


def test_endpoint_metrics_vllm_counter_deltas(fake_pair):
    both(fake_pair, "alpha", vllm_choice([1]))
    fake_pair.candidate.metrics = [VLLM_BEFORE, VLLM_AFTER]
    report = run(fake_pair, prompts=PROMPTS[:1], metrics_url=fake_pair.candidate_url + "/metrics")
    figures = report.acceptance
    assert figures is not None and figures.source == "vllm"
    assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (30, 450, 130)
    assert figures.mean_acceptance_length == pytest.approx(1 + 130 / 30)
    assert figures.acceptance_rate == pytest.approx(130 / 450)
    assert report.warnings == ()


def test_endpoint_metrics_sglang_gauge_and_red_flags():
    text = 'sglang:spec_accept_length{model_name="m",tp_rank="0"} 3.5\n'
    text += 'sglang:spec_accept_length{model_name="m",tp_rank="1"} 4.5\n'
    text += "sglang:spec_accept_rate 1.0\n"
    figures = acceptance_from_metrics({}, parse_prometheus(text))
    assert figures is not None and figures.source == "sglang"
    assert figures.mean_acceptance_length == pytest.approx(4.0)
    assert any("every drafted token" in w for w in acceptance_warnings(figures))
    collapsed = acceptance_from_metrics({}, parse_prometheus("sglang:spec_accept_length 1.02\n"))
    assert any("collapsed" in w for w in acceptance_warnings(collapsed))
    assert acceptance_warnings(acceptance_from_metrics({}, parse_prometheus("up 1\n")))
    # SGLang's gauges read 0 when it does not speculate: no figure, never a collapse
    off = acceptance_from_metrics({}, parse_prometheus(
        "sglang:spec_accept_length 0.0\nsglang:spec_accept_rate 0.0\n"))
    assert off is not None and off.mean_acceptance_length is None and off.acceptance_rate is None
    assert acceptance_warnings(off) == ["sglang:spec_accept_length is under 1: is speculation "
                                        "enabled?"]
    assert "does not speculate" in (metrics_cannot_tell(off) or "")


def test_endpoint_metrics_unreachable_is_an_error(fake_pair):
    both(fake_pair, "alpha", vllm_choice([1]))
    with pytest.raises(EndpointError, match="HTTP 404"):
        run(fake_pair, prompts=PROMPTS[:1], metrics_url=fake_pair.candidate_url + "/nope")


def test_endpoint_parse_completion_rejects_garbage():
    for payload in ([], {"choices": []}, {"choices": [{"text": 3}]},
                    {"choices": [{"text": "x", "logprobs": {"top_logprobs": [{"a": "high"}]}}]},
                    {"choices": [{"text": "x", "token_ids": [1, "2"]}]}):
        with pytest.raises(ValueError):
            parse_completion(payload)
    ok = parse_completion({"choices": [{"text": "ab", "token_ids": [4, 2],
                                        "logprobs": {"tokens": ["a", "b"]}}]})
    assert ok.token_ids == (4, 2) and ok.token_texts == ("a", "b")


def test_endpoint_prompt_file_and_urls(tmp_path):
    good = tmp_path / "p.jsonl"
    good.write_text('{"id": "x", "prompt": "hi", "stop": [".", 7]}\n\n'
                    '{"id": "y", "prompt_ids": [1, 2], "max_new_tokens": 3}\n')
    assert read_prompts(good) == [PromptSpec("x", "hi", None, (".", 7)),
                                  PromptSpec("y", (1, 2), 3)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(InputError, match="bad.jsonl:2"):
        read_prompts(bad)
    for line in ('{"prompt": "no id"}', '{"id": "a", "text": "old alias"}',
                 '{"id": "a", "prompt": "x", "stop": [true]}'):
        bad.write_text(line + "\n")  # the one loader is as strict for endpoints as for local
        with pytest.raises(InputError, match="bad.jsonl:1"):
            read_prompts(bad)
    assert completions_url("http://h:8000") == "http://h:8000/v1/completions"
    assert completions_url("http://h:8000/v1/") == "http://h:8000/v1/completions"
    assert redact_url("https://user:pw@h/v1?key=s") == "https://h/v1"
    with pytest.raises(InputError):
        completions_url("h:8000")


def test_endpoint_malformed_urls_are_input_errors(fake_pair):
    """An unparsable URL (unclosed IPv6 bracket) was an internal error, for --metrics too."""
    with pytest.raises(InputError, match="not an http"):
        completions_url("http://[::1")
    with pytest.raises(InputError, match="not an http"):
        run(fake_pair, prompts=PROMPTS[:1], metrics_url="http://[bad")
    assert redact_url("http://u:pw@[bad") == "(malformed URL)"
