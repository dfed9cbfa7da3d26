"""Target families through the whole guard: a random Llama-3.1 target with a DFlash drafter goes
through `dflash-guard difftest` identical, and every config kernels_ref cannot run is refused by
name (kernels_ref's `RunnerError`, exit 2 from the CLI), never run silently wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from kernels_ref.errors import RunnerError
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.oracle import OracleDrafter
from kernels_ref.rope import Rope
from tests.support.hf_models import LLAMA31_ROPE, write_drafter, write_hf_target

PROMPTS = [
    {"id": "count", "prompt_ids": [1, *range(40, 60)]},
    {"id": "repeat", "prompt_ids": [1, 7, 8, 9, 7, 8, 9, 7, 8, 9], "max_new_tokens": 20},
    {"id": "one-token", "prompt_ids": [1]},
]


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A random Llama-3.1 target (saved by transformers) and a Qwen3-layer DFlash drafter."""
    root = tmp_path_factory.mktemp("llama-pair")
    target = write_hf_target(root / "target", "llama", seed=5, rope_parameters=LLAMA31_ROPE)
    drafter = write_drafter(root / "drafter", target, seed=6, mask_token_id=297,
                            layer_ids=[1, 2])
    return target, drafter


def test_llama_drafter_uses_qwen3_layers_and_the_targets_rope(llama_pair) -> None:
    target = load_target(llama_pair[0])
    drafter = load_drafter(llama_pair[1], target)
    assert (target.config.model_type, target.config.qk_norm) == ("llama", False)
    assert drafter.config.layers.qk_norm  # DFlashDraftModel is built from Qwen3 layers
    assert drafter.config.layers.rope == target.config.rope
    assert drafter.config.layers.rope.kind == "llama3"


@pytest.mark.parametrize(("inject", "code"), [(None, 0), ("stale-kv", 1)])
def test_llama_pair_through_difftest(
    llama_pair, cli, tmp_path: Path, inject: str | None, code: int
) -> None:
    """Identical outputs; a planted stale KV cache (every random draft is rejected) diverges."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS), encoding="utf-8")
    target, drafter = llama_pair
    fault = ("--inject", inject) if inject else ()
    result = cli("difftest", "local", "--target", target, "--drafter", drafter, "--prompts",
                 prompts,
                 "--max-new-tokens", "32", "--format", "json", *fault)
    assert result.exit_code == code, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["overall"]["identical"] is (inject is None)
    assert len(report["prompts"]) == len(PROMPTS)


def test_llama_target_verifies_accepted_blocks(llama_pair) -> None:
    """Multi-token verification on the Llama target (RoPE offsets, cache crops) keeps greedy
    output: an oracle drafter's blocks are accepted whole and the tokens equal AR's."""
    target = load_target(llama_pair[0])
    prompt = PROMPTS[0]["prompt_ids"]
    ar = generate(target, None, prompt, max_new_tokens=32, stop_ids=frozenset())
    oracle = OracleDrafter.for_prompt(target, prompt, max_new_tokens=40, stop_ids=frozenset(),
                                      block_size=4)
    spec = generate(target, oracle, prompt, max_new_tokens=32, stop_ids=frozenset())
    assert spec.tokens == ar.tokens
    assert spec.tau > 3


def test_llama3_rope_tables_need_no_host_read() -> None:
    """CUDA graphs capture the RoPE tables with every step: on the meta device, where any host
    read raises, the llama3 tables still build."""
    rope = Rope.from_config({"rope_parameters": LLAMA31_ROPE}, "config.json")
    cos, sin = rope.tables(torch.arange(5, device="meta"), 24, torch.float32)
    assert cos.shape == sin.shape == (5, 24)


UNSUPPORTED: dict[str, tuple[dict[str, Any], str]] = {
    "model_type": ({"model_type": "mistral"}, "model_type 'mistral' is not supported"),
    "architecture": (
        {"architectures": ["LlamaForSequenceClassification"]},
        "architectures .*LlamaForSequenceClassification",
    ),
    "qwen3.5-hybrid": (
        {"model_type": "qwen3_5_text",
         "layer_types": ["linear_attention", "linear_attention", "linear_attention",
                         "full_attention"]},
        r"layer_types \['linear_attention'\] \(hybrid linear attention\)",
    ),
    "sliding-window-layers": (
        {"layer_types": ["full_attention", "sliding_attention"] * 2},
        r"layer_types \['sliding_attention'\]",
    ),
    "layer_types-not-a-list": ({"layer_types": 4}, "'layer_types' must be a list"),
    "use_sliding_window": ({"use_sliding_window": True}, "use_sliding_window=True"),
    "rope_scaling-yarn": (
        {"rope_parameters": None, "rope_scaling": {"type": "yarn", "factor": 4.0}},
        "rope type 'yarn' is not supported",
    ),
    "rope_parameters-dynamic": (
        {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}},
        "rope type 'dynamic' is not supported",
    ),
    "per-layer-rope": (
        {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}}},
        "per-layer RoPE",
    ),
    "partial-rotary": ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
    "llama3-missing-factor": (
        {"rope_parameters": {**LLAMA31_ROPE, "factor": None}}, "rope field 'factor'"
    ),
    "hidden_act": ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    "pretraining_tp": ({"pretraining_tp": 2}, "pretraining_tp=2"),
}


def _edit(path: Path, changes: dict[str, Any]) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw.update(changes)
    path.write_text(json.dumps(raw), encoding="utf-8")


@pytest.mark.parametrize(("changes", "message"), UNSUPPORTED.values(), ids=UNSUPPORTED.keys())
def test_unsupported_target_is_refused_by_name(
    llama_pair, tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    target = write_hf_target(tmp_path / "target", "llama", seed=5, rope_parameters=LLAMA31_ROPE)
    _edit(target / "config.json", changes)
    with pytest.raises(RunnerError, match=message):
        load_target(target)


@pytest.mark.parametrize(
    ("changes", "message"),
    [UNSUPPORTED["rope_scaling-yarn"], ({"layer_types": ["sliding_attention"]}, "layer_types")],
    ids=["rope", "layer_types"],
)
def test_unsupported_drafter_is_refused_by_name(
    llama_pair, tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    drafter = write_drafter(tmp_path / "drafter", llama_pair[0], seed=6, mask_token_id=297,
                            layer_ids=[1, 2])
    _edit(drafter / "config.json", changes)
    with pytest.raises(RunnerError, match=message):
        load_drafter(drafter, load_target(llama_pair[0]))


def test_difftest_exits_2_naming_the_unsupported_target(llama_pair, cli, tmp_path) -> None:
    target = write_hf_target(tmp_path / "target", "qwen3", seed=5)
    _edit(target / "config.json", UNSUPPORTED["qwen3.5-hybrid"][0])
    result = cli("difftest", "local", "--target", target, "--drafter", llama_pair[1])
    assert result.exit_code == 2
    assert "hybrid linear attention" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr + result.stdout
