"""Reading llama.cpp: its `/metrics` counters (with the per-position breakdown), its completions'
`logprobs.content` format and per-response `timings`, next to vLLM's."""

from __future__ import annotations

import pytest

from dflash_guard.lossless.endpoint import (
    acceptance_from_metrics,
    acceptance_warnings,
    parse_completion,
    parse_prometheus,
)
from dflash_guard.lossless.endpoint.metrics import ResponseDrafts


def llamacpp_metrics(drafts: int, drafted: int, accepted: int, per_pos: list[int]) -> str:
    lines = [
        "# HELP llamacpp:spec_decode_num_drafts_total Number of drafts.",
        "# TYPE llamacpp:spec_decode_num_drafts_total counter",
        f"llamacpp:spec_decode_num_drafts_total {drafts}",
        f"llamacpp:spec_decode_num_draft_tokens_total {drafted}",
        f"llamacpp:spec_decode_num_accepted_tokens_total {accepted}",
        "llamacpp:prompt_tokens_total 99",
    ]
    lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {n}'
              for i, n in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def test_llamacpp_counters_give_tau_and_the_per_position_curve():
    before = parse_prometheus(llamacpp_metrics(2, 14, 3, [2, 1, 0]))
    after = parse_prometheus(llamacpp_metrics(12, 84, 18, [10, 6, 2]))
    figures = acceptance_from_metrics(before, after)
    assert figures is not None and figures.source == "llamacpp"
    assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (10, 70, 15)
    assert figures.mean_acceptance_length == pytest.approx(2.5)
    assert figures.acceptance_rate == pytest.approx(15 / 70)
    assert figures.accepted_per_position == (8, 5, 2)
    assert figures.acceptance_curve == pytest.approx((0.8, 0.5, 0.2))
    assert acceptance_warnings(figures) == []


def test_llamacpp_red_flags_no_drafts_and_an_impossible_curve():
    idle = acceptance_from_metrics({}, parse_prometheus(llamacpp_metrics(0, 0, 0, [])))
    assert idle is not None and any("no drafts" in w for w in acceptance_warnings(idle))
    rising = acceptance_from_metrics({}, parse_prometheus(llamacpp_metrics(10, 70, 9, [2, 7])))
    assert any("inconsistent" in w for w in acceptance_warnings(rising))


def test_vllm_per_position_counters_are_read_the_same_way():
    text = "vllm:spec_decode_num_drafts_total{engine=\"0\"} 4\n"
    text += "vllm:spec_decode_num_draft_tokens_total{engine=\"0\"} 12\n"
    text += "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\"} 6\n"
    for engine in (0, 1):
        text += (f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{engine}",'
                 f'position="0"}} 2\n')
    figures = acceptance_from_metrics({}, parse_prometheus(text))
    assert figures is not None and figures.source == "vllm"
    assert figures.accepted_per_position == (4,)  # summed over engines


def llamacpp_completion(ids: list[int], tops: list[dict[int, float]], timings=None) -> dict:
    content = [
        {"id": token, "token": chr(token), "bytes": [token], "logprob": -0.1,
         "top_logprobs": [{"id": t, "token": chr(t), "bytes": [t], "logprob": v}
                          for t, v in top.items()]}
        for token, top in zip(ids, tops, strict=True)
    ]
    body = {"choices": [{"text": "".join(map(chr, ids)), "index": 0,
                         "logprobs": {"content": content}, "finish_reason": "length"}]}
    if timings is not None:
        body["timings"] = timings
    return body


def test_llamacpp_logprobs_content_gives_token_ids_and_ranked_alternatives():
    completion = parse_completion(llamacpp_completion(
        [104, 105], [{104: -0.1, 97: -2.0}, {98: -3.0, 105: -0.2}],
        {"predicted_n": 2, "draft_n": 7, "draft_n_accepted": 3}))
    assert completion.token_ids == (104, 105)
    assert completion.at(1).top == ((105, -0.2), (98, -3.0))
    assert completion.drafts == (7, 3)
    assert parse_completion(llamacpp_completion([1], [{1: -0.1}])).drafts is None


def test_llamacpp_malformed_content_and_timings_are_rejected():
    bad_id = llamacpp_completion([104], [{104: -0.1}])
    bad_id["choices"][0]["logprobs"]["content"][0]["id"] = "h"
    with pytest.raises(ValueError, match="integer `id`"):
        parse_completion(bad_id)
    with pytest.raises(ValueError, match="accepted"):
        parse_completion(llamacpp_completion([1], [{1: -0.1}],
                                             {"draft_n": 2, "draft_n_accepted": 5}))


def test_response_drafts_total():
    assert ResponseDrafts.total([None, None]) is None
    total = ResponseDrafts.total([(7, 3), None, (14, 9)])
    assert total == ResponseDrafts(2, 21, 12) and total.acceptance_rate == pytest.approx(12 / 21)
