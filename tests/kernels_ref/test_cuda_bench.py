"""benchmarks/bench_cuda.py: its arithmetic, and its whole harness in --smoke mode on CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from kernels_ref.model import ModelConfig

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cuda.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_cuda_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_layer_ids_follow_dflash_defaults(bench) -> None:
    assert bench.layer_ids(36) == (1, 9, 17, 25, 33)
    assert bench.layer_ids(28) == (1, 7, 13, 19, 25)


def test_step_bytes_count_weights_and_kv(bench) -> None:
    cfg = ModelConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        intermediate_size=32,
    )
    target, drafter = bench.random_pair(cfg, 4, torch.device("cpu"), torch.float32)
    moved = bench.step_bytes(target, drafter, context=10)
    embed = 100 * 16 * 4
    all_target = sum(p.numel() for p in target.parameters()) * 4
    kv = 2 * 6 * 1 * 8 * 10 * 4
    assert moved["target"] == all_target - embed + kv  # untied: only the head matrix is read
    context_only = (drafter.fc.weight.numel() + drafter.hidden_norm.weight.numel()) * 4
    drafter_kv = 2 * 5 * 1 * 8 * 10 * 4
    draft = sum(p.numel() for p in drafter.parameters()) * 4 - context_only + embed  # + the head
    assert moved["draft"] == draft + drafter_kv
    kv_proj = sum(
        layer.self_attn.k_proj.weight.numel()
        + layer.self_attn.v_proj.weight.numel()
        + layer.self_attn.k_norm.weight.numel()
        for layer in drafter.layers
    )
    assert moved["context"] == context_only + kv_proj * 4


def test_predicted_speedup_and_slug(bench) -> None:
    steps = {
        "decode": {"graph_ms": 5.0, "eager_ms": 15.0},
        "verify": {"graph_ms": 5.5, "eager_ms": 16.0},
        "draft": {"graph_ms": 0.5, "eager_ms": 4.0},
        "context": {"graph_ms": 0.5, "eager_ms": 2.0},
    }
    assert bench.predicted_speedup(6.5, steps, "graph_ms", True) == pytest.approx(5.0)
    assert bench.predicted_speedup(6.5, steps, "graph_ms", False) == pytest.approx(6.5 * 5 / 5.5)
    assert bench.gpu_slug("NVIDIA H200") == "nvidia-h200"


def test_smoke_runs_every_path_on_cpu_and_writes_nothing(bench, tmp_path, capsys) -> None:
    assert bench.main(["--smoke", "--out", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    steps = ("decode step ms", "verify step ms", "draft step ms", "context step ms")
    for row in (*steps, "AR tokens/s"):
        assert f"tiny     {row}" in out and f"fixture  {row}" in out
    assert "spec (oracle)" in out and "spec (drafter)" in out
    assert "bfloat16 divergences" in out and "0 hard" in out
    assert not (tmp_path / "results").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_without_cuda_the_full_run_refuses(bench, capsys) -> None:
    assert bench.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err
