"""kernels_ref against transformers: random-weight Qwen3 and Llama targets saved by transformers
load into kernels_ref with the same fp32 logits and the same greedy continuation.

Each case covers what real checkpoints use: transformers 5's `rope_parameters` and the older
top-level `rope_theta`/`rope_scaling`, Llama-3.1's `llama3` RoPE, tied and untied embeddings,
`head_dim` != hidden/heads, GQA, attention and MLP biases, `eos_token_id` lists, and sharded
bf16 weights (both sides load the same files and upcast them to fp32).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from kernels_ref.checkpoint import eos_token_ids
from kernels_ref.generate import generate
from kernels_ref.load import load_target
from kernels_ref.rope import Rope
from tests.support.hf_models import LLAMA31_ROPE, write_hf_target

CASES: dict[str, dict[str, Any]] = {
    "qwen3-untied-rope_parameters": {"model_type": "qwen3"},
    "qwen3-tied-legacy-eos-list": {
        "model_type": "qwen3", "tie_word_embeddings": True, "legacy_rope": True,
        "eos_token_id": [298, 299],
    },
    "qwen3-sharded-bf16-bias": {
        "model_type": "qwen3", "dtype": torch.bfloat16, "max_shard_size": "100KB",
        "attention_bias": True,
    },
    "llama31-untied-biases": {
        "model_type": "llama", "rope_parameters": LLAMA31_ROPE, "attention_bias": True,
        "mlp_bias": True, "eos_token_id": [298, 299],
    },
    "llama31-tied-legacy": {
        "model_type": "llama", "rope_parameters": LLAMA31_ROPE, "tie_word_embeddings": True,
        "legacy_rope": True,
    },
    "llama31-sharded-bf16": {
        "model_type": "llama", "rope_parameters": LLAMA31_ROPE, "dtype": torch.bfloat16,
        "max_shard_size": "100KB",
    },
}
PROMPT = [1, *range(40, 140, 3), 7, 7, 7, 250]  # 39 tokens: past the llama3 short-wave band


@pytest.fixture(scope="module", params=sorted(CASES), ids=sorted(CASES))
def parity_models(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(folder, kernels_ref target, transformers model) for one case, loaded once."""
    case = dict(CASES[request.param])
    folder = write_hf_target(
        tmp_path_factory.mktemp(request.param), case.pop("model_type"), seed=11, **case
    )
    theirs = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    return folder, load_target(folder), theirs


def test_the_case_is_what_it_claims(parity_models) -> None:
    folder, ours, _ = parity_models
    raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert ours.config.head_dim != ours.config.hidden_size // ours.config.num_attention_heads
    assert ours.config.num_key_value_heads < ours.config.num_attention_heads
    assert (ours.lm_head is None) == raw["tie_word_embeddings"]
    assert ours.config.qk_norm == (raw["model_type"] == "qwen3")
    if raw.get("rope_scaling") or raw.get("rope_parameters", {}).get("rope_type") == "llama3":
        assert ours.config.rope.kind == "llama3"
    if raw.get("dtype") == "bfloat16":
        assert (folder / "model.safetensors.index.json").is_file()


def test_logits_and_hidden_states_match(parity_models) -> None:
    _, ours, theirs = parity_models
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        logits, hidden = ours(ids, torch.arange(len(PROMPT)), ours.new_cache())
        reference = theirs(ids, output_hidden_states=True)
    torch.testing.assert_close(logits, reference.logits, atol=1e-5, rtol=1e-5)
    # every layer boundary but the last (transformers' last entry is after the final norm)
    for index, (a, b) in enumerate(zip(hidden[:-1], reference.hidden_states[:-1], strict=True)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=f"hidden state {index}")


def test_greedy_continuations_are_equal(parity_models) -> None:
    folder, ours, theirs = parity_models
    stops = eos_token_ids(folder)
    expected_stops = theirs.generation_config.eos_token_id
    assert stops == frozenset(
        expected_stops if isinstance(expected_stops, list) else [expected_stops]
    )
    ours_out = generate(ours, None, PROMPT, max_new_tokens=24, stop_ids=stops).tokens
    with torch.inference_mode():
        out = theirs.generate(
            torch.tensor([PROMPT]), max_new_tokens=24, do_sample=False, pad_token_id=0
        )
    assert ours_out == out[0, len(PROMPT):].tolist()
    assert len(set(ours_out)) > 1  # a real continuation, not one repeated token


@pytest.mark.parametrize(
    "rope",
    [{"rope_type": "default", "rope_theta": 1e6}, LLAMA31_ROPE],
    ids=["default", "llama3"],
)
def test_rope_frequencies_equal_transformers(rope: dict[str, Any]) -> None:
    config = LlamaConfig(head_dim=24, hidden_size=64, num_attention_heads=4,
                         rope_parameters=dict(rope))
    rotary = LlamaRotaryEmbedding(config)
    ours = Rope.from_config({"rope_parameters": rope}, "config.json")
    cpu = torch.device("cpu")
    assert rotary.attention_scaling == 1.0
    assert torch.equal(ours.inverse_frequencies(24, cpu, torch.float32), rotary.inv_freq)
    plain = Rope(theta=rope["rope_theta"]).inverse_frequencies(24, cpu, torch.float32)
    assert torch.equal(plain, rotary.inv_freq) == (rope["rope_type"] == "default")
