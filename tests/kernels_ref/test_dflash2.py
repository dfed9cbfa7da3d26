"""The DFlash 2 drafter (`kernels_ref.drafter2`): z-lab's peer, its parts, and its refusals.

The peer test runs a random-weight DFlash 2 drafter (random convolutions and selector on top of
a random v1 drafter) against z-lab's `DFlash2DraftModel` through `dflash_generate`, fp32 CPU,
greedy: tokens, per-step acceptance and every step's drafted block are equal.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from dflash_guard.lossless.prompts import Prompt, load_prompts
from kernels_ref.drafter2 import BlockConv, CandidateSelector, Drafter2, Drafter2Config
from kernels_ref.errors import RunnerError
from kernels_ref.fixtures_dflash2 import dflash2_config, dflash2_tensors
from kernels_ref.load import load_drafter, load_target
from kernels_ref.prompts import DEFAULT_PROMPTS
from kernels_ref.tokenizer import load_tokenizer
from tests.kernels_ref.test_peer_zlab import assert_peer_equal
from tests.support.kernels import random_configs, random_pair

pytestmark = pytest.mark.usefixtures("cpu_timer")  # z-lab's clock, on the CPU


def make_v2(drafter_dir: Path, seed: int, context: int, **fields: Any) -> None:
    """Turn the v1 drafter in `drafter_dir` into a DFlash 2 one (random v2 parts)."""
    config = dflash2_config(
        json.loads((drafter_dir / "config.json").read_text()), context=context, **fields
    )
    (drafter_dir / "config.json").write_text(json.dumps(config))
    weights = load_file(drafter_dir / "model.safetensors")
    tensors = dflash2_tensors(weights, config, seed, selector_scale=1.0)
    save_file({k: v.contiguous() for k, v in tensors.items()}, drafter_dir / "model.safetensors")


def test_random_dflash2_drafter_equals_zlab_step_for_step(tmp_path: Path) -> None:
    target_dir, drafter_dir = random_pair(
        tmp_path, seed=5, target_layers=4, drafter_layers=2, block_size=8, layer_ids=(1, 3)
    )
    make_v2(drafter_dir, seed=9, context=128, conv_kernel_size=3, selector_top_k=5)
    target = load_target(target_dir)
    assert isinstance(load_drafter(drafter_dir, target), Drafter2)
    rng = random.Random(13)
    prompts = [
        Prompt(f"random-{n}", tuple(rng.randrange(256) for _ in range(length)), budget)
        for n, (length, budget) in enumerate([(1, 64), (5, 13), (17, 64), (40, 9), (3, 2)])
    ]
    assert_peer_equal(target_dir, drafter_dir, prompts)


def test_builtin_dflash2_drafter_equals_zlab_on_the_default_prompts(dflash2_pair) -> None:
    target_dir, drafter_dir = dflash2_pair.target, dflash2_pair.drafter
    prompts = load_prompts(DEFAULT_PROMPTS, load_tokenizer(target_dir), 264)
    table = assert_peer_equal(target_dir, drafter_dir, prompts)
    assert table["tau_upstream"] >= 2.0  # the trained layers still draft through the v2 parts


def test_fixtures_make_dflash2_then_difftest_is_identical_with_a_tau(
    cli, tmp_path: Path, dflash2_pair
) -> None:
    made = cli("fixtures", "make", tmp_path / "v2", "--dflash2")
    assert made.exit_code == 0, made.stderr
    drafter_dir = tmp_path / "v2" / "drafter"
    assert json.loads((drafter_dir / "config.json").read_text())["architectures"] == [
        "DFlash2DraftModel"
    ]
    # Deterministic: the same bytes as the module's pair.
    for name in ("config.json", "model.safetensors"):
        assert (drafter_dir / name).read_bytes() == (dflash2_pair.drafter / name).read_bytes()
    prompts = tmp_path / "fast.jsonl"
    prompts.write_text('{"id": "code", "prompt": "def mean(data):\\n    "}\n')
    result = cli(
        "difftest", "local", "--target", tmp_path / "v2" / "target", "--drafter", drafter_dir,
        "--prompts", prompts, "--max-new-tokens", "48", "--format", "json",
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["overall"]["identical"] is True
    assert report["overall"]["tau_mean"] > 2.0


def test_selector_walk_is_argmax_without_pairwise_scores_and_follows_them_with() -> None:
    _, drafter = random_configs(hidden=32, drafter_layers=1)
    config = Drafter2Config.from_dict(dflash2_config(drafter, context=128), "drafter")
    selector = CandidateSelector(config)
    logits = torch.zeros(1, 2, config.layers.vocab_size)
    logits[0, 0, 10], logits[0, 0, 11] = 2.0, 1.5  # position 1 prefers 10 by 0.5
    logits[0, 1, 20], logits[0, 1, 21] = 2.0, 1.9
    hidden = torch.randn(1, 2, 32)
    anchor = torch.tensor([3])
    assert selector.walk(hidden, logits, anchor).tolist() == [10, 20]
    with torch.no_grad():  # a pairwise score of +1 for anchor 3 -> 11 overrides the logit gap
        selector.hidden_projection.weight.zero_()
        selector.hidden_projection.weight[0, 0] = 1.0
        selector.predecessor_codebook[3, 0] = 1.0
        selector.successor_codebook[11, 0] = 1.0 / hidden[0, 0, 0].item()
    assert selector.walk(hidden, logits, anchor).tolist() == [11, 20]


def test_block_convolution_never_reads_before_the_block_start() -> None:
    conv = BlockConv(hidden=32, kernel=3, group=16)
    with torch.no_grad():
        conv.base_kernel.normal_()
        conv.kernel_projection.weight.normal_()
    x = torch.randn(1, 4, 32)
    coefficients = conv.coefficients(x)
    out = conv.convolve(x, 0, coefficients)
    later = x.clone()
    later[:, 1:] += 1.0  # positions after 0 change: position 0's output must not
    moved = conv.convolve(later, 0, coefficients)
    assert torch.equal(out[:, 0], moved[:, 0])
    assert not torch.equal(out[:, 1], moved[:, 1])
    # Tap 1 of position 1 reads position 0 with the base kernel plus its coefficient.
    expected = sum(
        (conv.base_kernel[0, tap].view(2, 16) + coefficients[0, 1, 0, tap].view(2, 1))
        * x[0, 1 - tap].view(2, 16)
        for tap in range(2)
    )
    assert torch.allclose(out[0, 1], expected.reshape(32), atol=1e-6)


def v2_raw(**changes: Any) -> dict[str, Any]:
    _, drafter = random_configs(hidden=32)
    raw = dflash2_config(drafter, context=128)
    nested = changes.pop("dflash_config", {})
    raw["dflash_config"].update(nested)
    raw.update(changes)
    return raw


def test_nested_block_size_wins_over_a_top_level_one() -> None:
    raw = v2_raw(block_size=16, dflash_config={"block_size": 6})
    assert Drafter2Config.from_dict(raw, "cfg").block_size == 6


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dflash_config": {"conv_group_size": 12}}, "not a multiple of conv_group_size"),
        ({"dflash_config": {"selector_top_k": 0}}, "'selector_top_k' must be a positive"),
        ({"dflash_config": {"selector_rank": True}}, "'selector_rank' must be a positive"),
        ({"dflash_config": {"selector_top_k": 10_000}}, "selector_top_k exceeds vocab_size"),
        ({"is_causal": None}, "need 'is_causal': false"),
        ({"layer_types": ["chunked_attention"]}, "not supported"),
    ],
)
def test_dflash2_config_refusals(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(RunnerError, match=message):
        Drafter2Config.from_dict(v2_raw(**changes), "cfg")


def test_a_window_narrower_than_the_context_is_refused(tmp_path: Path) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, seed=1)
    make_v2(drafter_dir, seed=2, context=64)  # the target's context is 128
    with pytest.raises(RunnerError, match="sliding_window 64 is shorter than the target's"):
        load_drafter(drafter_dir, load_target(target_dir))


def test_a_dflash2_architecture_without_its_fields_is_refused(tmp_path: Path) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, seed=6)
    config = json.loads((drafter_dir / "config.json").read_text())
    config["architectures"] = ["DFlash2DraftModel"]  # a v1 config under the v2 name
    (drafter_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(RunnerError, match="'conv_group_size' must be a positive integer"):
        load_drafter(drafter_dir, load_target(target_dir))
