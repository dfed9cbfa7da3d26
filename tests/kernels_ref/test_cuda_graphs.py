"""The graph runner: buffer sizing, step selection, eager fallback on CPU, replay on CUDA."""

from __future__ import annotations

import pytest
import torch

from dflash_guard.errors import InputError
from dflash_guard.lossless.local import difftest_models, load_prompts, run_difftest
from dflash_guard.lossless.options import LocalOptions
from kernels_ref.cuda_graphs import ALIGN, GraphRunner, static_len, step_sizes
from kernels_ref.faults import Fault
from kernels_ref.fixtures import EOS_ID
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.oracle import OracleDrafter
from kernels_ref.prompts import DEFAULT_PROMPTS
from kernels_ref.tokenizer import load_tokenizer
from tests.support.cuda import gpu_only, tiny_pair

PROMPTS = [b"def mean(data):\n    ", b"x", b"abcabcabcabc"]


def test_static_len_fits_prompt_and_budget_aligned_and_capped() -> None:
    assert static_len(20, 40, 4096) == 64
    assert static_len(20, 44, 4096) == 64 and static_len(20, 45, 4096) == 80
    assert static_len(200, 100, 256) == 256
    assert static_len(1, 1, 4096) == ALIGN
    with pytest.raises(ValueError):
        static_len(0, 8, 256)


def test_step_sizes_pick_decode_verify_and_draft_graphs() -> None:
    assert step_sizes([16]) == ((1, 16), (16,))
    assert step_sizes([8, 16, 8]) == ((1, 8, 16), (8, 16))
    assert step_sizes([1]) == ((1,), ())
    with pytest.raises(ValueError):
        step_sizes([])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_runner_falls_back_to_eager_without_cuda(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    runner = GraphRunner(target, drafter, max_len=64, block_sizes=(8,))
    assert runner.captured is False
    assert sorted(runner.target.graphs) == [1, 8] and sorted(runner.drafter.graphs) == [8]
    assert all(graph.graph is None for graph in runner.target.graphs.values())
    with pytest.raises(ValueError, match="CUDA device"):
        GraphRunner(target, drafter, max_len=64, capture=True)


def test_captured_steps_never_read_the_device_back() -> None:
    """On the meta device every host read raises, and so does a data-dependent shape: the steps a
    graph captures (decode, verify, draft) must run there, as CUDA-graph capture requires."""
    target, drafter = tiny_pair(0, block_size=4)
    runner = GraphRunner(
        target.to("meta"), drafter.to("meta"), max_len=32, block_sizes=(4, 8), capture=False
    )
    with torch.inference_mode():
        for t, graph in runner.target.graphs.items():
            logits, hidden = graph.step()
            assert logits.shape == (1, t, target.config.vocab_size) and len(hidden) == 4
        for t, graph in runner.drafter.graphs.items():
            assert graph.step().shape == (t - 1,)
        assert sorted(runner.drafter.context_graphs) == list(range(1, 9))
        for graph in runner.drafter.context_graphs.values():
            graph.step()
        with pytest.raises(RuntimeError, match="meta"):  # the control: a host read is caught
            len(runner.target.cache)


@pytest.mark.parametrize("block_size", [2, 8, 16])
def test_runner_decodes_exactly_as_the_plain_loop(cpu_fixture_models, block_size: int) -> None:
    target, drafter = cpu_fixture_models
    runner = GraphRunner(target, drafter, max_len=64, block_sizes=(block_size,))
    args = {"max_new_tokens": 40, "stop_ids": {EOS_ID}}
    for prompt in PROMPTS:
        ar = generate(target, None, list(prompt), **args)
        spec = generate(target, drafter, list(prompt), block_size=block_size, **args)
        assert generate(runner.target, None, list(prompt), **args).tokens == ar.tokens
        run = generate(runner.target, runner.drafter, list(prompt), block_size=block_size, **args)
        assert run.tokens == ar.tokens
        assert [s.accepted for s in run.steps] == [s.accepted for s in spec.steps]


def test_runner_replays_captured_sizes_and_runs_the_rest_eagerly(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    runner = GraphRunner(target, drafter, max_len=64, block_sizes=(8,))
    calls: dict[str, int] = {"decode": 0, "verify": 0, "draft": 0, "context": 0}
    for name, graph in (
        ("decode", runner.target.graphs[1]),
        ("verify", runner.target.graphs[8]),
        ("draft", runner.drafter.graphs[8]),
        *(("context", graph) for graph in runner.drafter.context_graphs.values()),
    ):
        step = graph.step

        def counted(step=step, name=name):
            calls[name] += 1
            return step()

        graph.step = counted
    args = {"max_new_tokens": 20, "stop_ids": set()}
    spec = generate(runner.target, runner.drafter, list(b"def mean(data):\n    "), **args)
    full_blocks = sum(1 for s in spec.steps if s.block_size == 8)
    assert calls["verify"] == calls["draft"] == full_blocks > 0  # the short last block: eager
    assert calls["context"] == len(spec.steps)  # every step's commit; the prompt's: eager
    assert calls["decode"] == 0
    ar = generate(runner.target, None, list(b"xy"), **args)
    assert calls["decode"] == len(ar.tokens) - 1  # every step after the (eager) prefill


def test_runner_with_random_pair_and_oracle() -> None:
    target, drafter = tiny_pair(5, block_size=5)
    runner = GraphRunner(target, drafter, max_len=48, block_sizes=(5,))
    prompt = [3, 1, 4, 1, 5, 9, 2]
    args = {"max_new_tokens": 30, "stop_ids": set()}
    ar = generate(target, None, prompt, **args)
    assert generate(runner.target, runner.drafter, prompt, **args).tokens == ar.tokens
    oracle = OracleDrafter.for_prompt(target, prompt, block_size=5, **args)
    assert generate(runner.target, oracle, prompt, block_size=5, **args).tokens == ar.tokens


def test_runner_refuses_foreign_caches_and_overlong_requests(cpu_fixture_models) -> None:
    target, drafter = cpu_fixture_models
    runner = GraphRunner(target, drafter, max_len=32, block_sizes=(4,))
    with pytest.raises(ValueError, match="32 positions"):
        runner.target.new_cache(40)
    with pytest.raises(ValueError, match="own cache"):
        runner.target(torch.tensor([[1]]), torch.tensor([0]), target.new_cache())
    with pytest.raises(ValueError, match="32 positions"):
        generate(runner.target, None, [1] * 20, max_new_tokens=30, stop_ids=set())


def test_difftest_through_the_runner_on_cpu(cpu_fixture_models, builtin_pair) -> None:
    target, drafter = cpu_fixture_models
    prompts = load_prompts(
        DEFAULT_PROMPTS, load_tokenizer(builtin_pair.target), target.config.vocab_size
    )[:4]
    args = {"stop_ids": frozenset({EOS_ID}), "max_new_tokens": 24}
    graphed = difftest_models(target, drafter, prompts, cuda_graphs=True, **args)
    plain = difftest_models(target, drafter, prompts, **args)
    assert graphed.identical and graphed.tau == plain.tau
    bad = difftest_models(
        target, drafter, prompts, cuda_graphs=True, inject=Fault.SKIP_BONUS, **args
    )
    assert not bad.identical
    with pytest.raises(InputError, match="stale-kv"):
        difftest_models(target, drafter, prompts, cuda_graphs=True, inject=Fault.STALE_KV, **args)


def test_cuda_graphs_flag_needs_a_cuda_device(cli, builtin_pair) -> None:
    target, drafter = builtin_pair.target, builtin_pair.drafter
    with pytest.raises(InputError, match="--device cuda"):
        run_difftest(LocalOptions(target, drafter, cuda_graphs=True))
    result = cli("difftest", "local", "--target", target, "--drafter", drafter, "--cuda-graphs")
    assert result.exit_code == 2 and "--device cuda" in result.stderr


@pytest.mark.gpu
@gpu_only
def test_graph_replay_is_exact_on_cuda_in_float32(builtin_pair) -> None:
    target = load_target(builtin_pair.target, "cuda")
    drafter = load_drafter(builtin_pair.drafter, target, "cuda")
    runner = GraphRunner(target, drafter, max_len=128, block_sizes=(8, 16))
    assert runner.captured
    args = {"max_new_tokens": 48, "stop_ids": {EOS_ID}}
    for prompt in PROMPTS:
        ar = generate(target, None, list(prompt), **args)
        assert generate(runner.target, None, list(prompt), **args).tokens == ar.tokens
        for block_size in (8, 16):
            run = generate(
                runner.target, runner.drafter, list(prompt), block_size=block_size, **args
            )
            assert run.tokens == ar.tokens


@pytest.mark.gpu
@gpu_only
def test_bfloat16_divergences_on_cuda_are_near_ties(builtin_pair) -> None:
    report = run_difftest(
        LocalOptions(builtin_pair.target, builtin_pair.drafter, device="cuda", dtype="bfloat16",
                     cuda_graphs=True)
    )
    assert all(result.divergence.near_tie for result in report.divergences)
