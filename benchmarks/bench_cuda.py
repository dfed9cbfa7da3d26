"""Time kernels_ref's decode, verify and draft steps on CUDA, eager and replayed as CUDA graphs.

    python benchmarks/bench_cuda.py [--shapes qwen3-0.6b,qwen3-8b] [--context 512]
        [--block-size 16] [--new-tokens 256] [--iters 20] [--dtype bfloat16]
    python benchmarks/bench_cuda.py --smoke   # the same code paths on CPU: tiny shapes, eager

For random-weight models in Qwen3-0.6B and Qwen3-8B shapes (built on the device, no checkpoint),
with a 5-layer drafter of the same width: the median time of one decode step (1 token), one
verify step (a block) and one draft step at `--context` tokens, timed with CUDA events; the
memory roofline of each step, bytes of weights and KV read divided by the bandwidth of a large
device-to-device copy measured here (read + write bytes over its time); end-to-end tokens/s,
autoregressive against speculative with the oracle drafter (the target's own future tokens: an
upper bound that isolates the verify cost), compared with tau x T(decode) / (T(verify) +
T(draft)) at the measured tau. On the built-in fixture pair: the same, with its trained drafter,
and how many bfloat16 greedy divergences on the default prompt set are near-ties (top-2 margin
under the bf16 rounding of the logits) and how many are hard. Prints one table; on CUDA writes
JSON to `benchmarks/results/<gpu-name>.json`.

End-to-end tokens/s is the wall time of `generate` (prefill included) through a `GraphRunner`.
T(draft) is the draft step plus the drafter's context update (timed for a whole block of
committed tokens, "context" in the table).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dflash_guard.fileio import write_atomic  # noqa: E402
from dflash_guard.lossless.local import default_stop_ids, difftest_models  # noqa: E402
from dflash_guard.lossless.prompts import load_prompts  # noqa: E402
from kernels_ref.config import ModelConfig  # noqa: E402
from kernels_ref.cuda_graphs import GraphRunner, static_len  # noqa: E402
from kernels_ref.drafter import Drafter, DrafterConfig  # noqa: E402
from kernels_ref.fixtures import VOCAB_SIZE, make_fixture_pair  # noqa: E402
from kernels_ref.generate import generate  # noqa: E402
from kernels_ref.load import (
    load_drafter,  # noqa: E402
    load_target,  # noqa: E402
)
from kernels_ref.loop import DraftModel, Generation, features_at  # noqa: E402
from kernels_ref.model import DecoderLayer, RMSNorm, Target  # noqa: E402
from kernels_ref.oracle import OracleDrafter  # noqa: E402
from kernels_ref.prompts import DEFAULT_PROMPTS  # noqa: E402
from kernels_ref.tokenizer import load_tokenizer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
QWEN3_VOCAB, QWEN3_MASK_ID = 151936, 151669
SHAPES = {
    "qwen3-0.6b": ModelConfig(
        vocab_size=QWEN3_VOCAB,
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
        tie_word_embeddings=True,
    ),
    "qwen3-8b": ModelConfig(
        vocab_size=QWEN3_VOCAB,
        hidden_size=4096,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=12288,
    ),
    "tiny": ModelConfig(  # --smoke only
        vocab_size=264,
        hidden_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        max_position_embeddings=256,
    ),
}
DRAFTER_LAYERS = 5


def layer_ids(n_layers: int, count: int = 5) -> tuple[int, ...]:
    """DFlash's default target layers: `count` evenly spaced from 1 to n_layers - 3."""
    last = max(n_layers - 3, 1)
    return tuple(sorted({round(1 + i * (last - 1) / (count - 1)) for i in range(count)}))


def random_pair(
    cfg: ModelConfig, block_size: int, device: torch.device, dtype: torch.dtype, seed: int = 0
) -> tuple[Target, Drafter]:
    """A target of shape `cfg` and a `DRAFTER_LAYERS`-layer drafter, random weights, built in
    place on `device` (normal(0, 0.02) matrices, unit norms)."""
    mask_id = QWEN3_MASK_ID if cfg.vocab_size == QWEN3_VOCAB else cfg.vocab_size - 5
    drafter_cfg = DrafterConfig(
        replace(cfg, num_hidden_layers=DRAFTER_LAYERS),
        block_size,
        cfg.num_hidden_layers,
        mask_id,
        layer_ids(cfg.num_hidden_layers),
    )
    with torch.device("meta"):
        target, drafter = Target(cfg), Drafter(drafter_cfg)
    generator = torch.Generator(device=device).manual_seed(seed)
    models = []
    for module in (target, drafter):
        module = module.to(dtype).to_empty(device=device)
        with torch.no_grad():
            for name, param in module.named_parameters():
                if name.endswith("norm.weight"):
                    param.fill_(1.0)
                else:
                    param.normal_(0.0, 0.02, generator=generator)
        models.append(module.eval())
    return models[0], models[1]  # type: ignore[return-value]


def param_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def step_bytes(target: Target, drafter: Drafter, context: int) -> dict[str, int]:
    """Bytes one step must read at `context` tokens: weights (the embedding table only where it
    is the tied head) and the keys/values of the context."""
    embed = target.model.embed_tokens.weight
    head = embed if target.lm_head is None else target.lm_head.weight
    weights = param_bytes(*target.parameters())
    if target.lm_head is not None:
        weights -= param_bytes(embed)  # only the rows of the step's tokens are read
    cfg, dcfg = target.config, drafter.config.layers
    kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * context
    draft_weights = param_bytes(*drafter.layers.parameters(), drafter.norm.weight, head)
    draft_kv = 2 * dcfg.num_hidden_layers * dcfg.num_key_value_heads * dcfg.head_dim * context
    size = embed.element_size()
    kv_weights: list[torch.Tensor] = []  # what the context update reads of each layer
    for layer in drafter.layers:
        assert isinstance(layer, DecoderLayer)  # nn.ModuleList yields plain Modules
        attn = layer.self_attn
        assert isinstance(attn.k_norm, RMSNorm)  # Qwen3 shapes: a per-head k norm
        kv_weights += [attn.k_proj.weight, attn.v_proj.weight, attn.k_norm.weight]
    context_weights = param_bytes(drafter.fc.weight, drafter.hidden_norm.weight, *kv_weights)
    return {
        "target": weights + kv * size,
        "draft": draft_weights + draft_kv * size,
        "context": context_weights,
    }


def rooflines(moved: dict[str, int], bandwidth: float) -> dict[str, float]:
    """Milliseconds each step needs at `bandwidth` bytes/s to read what it must."""
    return {
        "decode": moved["target"] / bandwidth * 1e3,
        "verify": moved["target"] / bandwidth * 1e3,  # weights dominate; the block adds little
        "draft": moved["draft"] / bandwidth * 1e3,
        "context": moved["context"] / bandwidth * 1e3,
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(
    fn: Callable[[], Any], device: torch.device, iters: int, setup: Callable[[], Any] | None = None
) -> float:
    """Median milliseconds of `fn()` over `iters` runs after two warm-ups; `setup()` runs before
    each, untimed (CUDA events on CUDA, the host clock elsewhere)."""
    for _ in range(2):
        if setup is not None:
            setup()
        fn()
    sync(device)
    times: list[float] = []
    for _ in range(iters):
        if setup is not None:
            setup()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            fn()
            times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def copy_bandwidth(device: torch.device, megabytes: int) -> float:
    """Bytes per second of a device-to-device copy (bytes read plus bytes written)."""
    src = torch.empty(megabytes << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, iters=10)
    return 2 * src.numel() / (ms / 1e3)


def time_steps(
    runner: GraphRunner, context: int, block: int, iters: int, graphs: bool
) -> dict[str, dict[str, float | None]]:
    """Eager and graph milliseconds of the decode, verify and draft steps at `context` tokens."""
    target, drafter = runner.target, runner.drafter
    assert drafter is not None
    device = target.model.embed_tokens.weight.device
    ids = torch.randint(0, target.config.vocab_size, (1, context), device=device)
    cache, draft_cache = target.new_cache(), drafter.new_cache()
    _, hidden = target(ids, torch.arange(context, device=device), cache)
    features = features_at(hidden, drafter.config.target_layer_ids)
    drafter.extend_context(draft_cache, features, torch.arange(context, device=device))
    target.positions[1].fill_(context)
    target.positions[block].copy_(torch.arange(context, context + block, device=device))
    drafter.start.fill_(context)
    steps = {
        "decode": (target.graphs[1], lambda: cache.crop(context)),
        "verify": (target.graphs[block], lambda: cache.crop(context)),
        "draft": (drafter.graphs[block], None),
        "context": (drafter.context_graphs[block], lambda: draft_cache.crop(context)),
    }
    out: dict[str, dict[str, float | None]] = {}
    for name, (graph, setup) in steps.items():
        out[name] = {
            "eager_ms": time_ms(graph.step, device, iters, setup),
            "graph_ms": time_ms(graph, device, iters, setup) if graphs else None,
        }
    cache.crop(context)
    return out


def timed_generate(
    device: torch.device, decode: Callable[[], Generation]
) -> tuple[Generation, float]:
    """One `decode()` (a bound `generate` call) and its wall seconds (after a synchronisation
    on each side)."""
    sync(device)
    began = time.perf_counter()
    out = decode()
    sync(device)
    return out, time.perf_counter() - began


def end_to_end(
    target: Target,
    runner: GraphRunner,
    prompts: list[list[int]],
    budgets: list[int],
    stops: list[frozenset[int]],
    block: int,
    with_drafter: bool,
) -> dict[str, float]:
    """Tokens/s of autoregressive and speculative decoding (oracle, and the runner's drafter
    when `with_drafter`) over `prompts`, through the runner; each measured after a warm-up."""
    device = target.model.embed_tokens.weight.device
    # A GraphTarget stands in for the Target `generate` is annotated with (duck-typed, as in
    # dflash_guard.lossless.local.difftest_models).
    graph_target: Any = runner.target
    walls: dict[str, float] = {}
    tokens: dict[str, int] = {}
    steps: dict[str, list[int]] = {}
    futures: list[OracleDrafter] = []
    plans: list[tuple[str, Callable[[int], DraftModel | None]]] = [("ar", lambda i: None)]
    plans.append(("oracle", lambda i: futures[i]))
    if with_drafter:
        plans.append(("drafter", lambda i: runner.drafter))
    for name, pick in plans:
        walls[name], tokens[name], steps[name] = 0.0, 0, []
        for i, (prompt, budget, stop) in enumerate(zip(prompts, budgets, stops, strict=True)):
            decode = partial(
                generate,
                graph_target,
                pick(i),
                prompt,
                max_new_tokens=budget,
                stop_ids=stop,
                block_size=block,
            )
            decode()  # warm-up
            out, wall = timed_generate(device, decode)
            if name == "ar":
                futures.append(OracleDrafter(target, [*prompt, *out.tokens], block))
            walls[name] += wall
            tokens[name] += len(out.tokens)
            steps[name] += [s.accepted + 1 for s in out.steps]
    result: dict[str, float] = {}
    for name in walls:
        result[f"{name}_tokens_per_s"] = tokens[name] / walls[name]
        if name != "ar":
            result[f"{name}_tau"] = sum(steps[name]) / max(len(steps[name]), 1)
    return result


def predicted_speedup(
    tau: float, steps: dict[str, dict[str, float | None]], key: str, draft: bool
) -> float | None:
    """tau x T(decode) / (T(verify) + T(draft)); T(draft) is the draft step plus the drafter's
    context update, 0 for the oracle."""
    names = ("decode", "verify", "draft", "context")
    decode, verify, drafting, context = (steps[name][key] for name in names)
    if decode is None or verify is None or drafting is None or context is None:
        return None
    return tau * decode / (verify + (drafting + context if draft else 0.0))


def bench_shape(
    name: str, args: argparse.Namespace, device: torch.device, dtype: torch.dtype, bw: float
) -> dict[str, Any]:
    """Step times, rooflines and end-to-end throughput of one random-weight shape."""
    cfg = SHAPES[name]
    target, drafter = random_pair(cfg, args.block_size, device, dtype)
    max_len = static_len(args.context, args.new_tokens, cfg.max_position_embeddings)
    with torch.inference_mode():
        runner = GraphRunner(target, drafter, max_len=max_len, block_sizes=(args.block_size,))
        steps = time_steps(runner, args.context, args.block_size, args.iters, runner.captured)
        prompt = torch.randint(0, cfg.vocab_size, (args.context,), generator=torch.Generator())
        e2e = end_to_end(
            target,
            runner,
            [prompt.tolist()],
            [args.new_tokens],
            [frozenset()],
            args.block_size,
            with_drafter=False,
        )
    moved = step_bytes(target, drafter, args.context)
    key = "graph_ms" if runner.captured else "eager_ms"
    result = {
        "shape": name,
        "config": cfg.__dict__,
        "context": args.context,
        "block_size": args.block_size,
        "static_cache_positions": max_len,
        "steps": steps,
        "bytes": moved,
        "roofline_ms": rooflines(moved, bw),
        "end_to_end": e2e,
        "timing_key": key,
        "oracle_predicted_speedup": predicted_speedup(e2e["oracle_tau"], steps, key, False),
        "oracle_measured_speedup": e2e["oracle_tokens_per_s"] / e2e["ar_tokens_per_s"],
    }
    del runner, target, drafter
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def bench_fixture(args: argparse.Namespace, device: torch.device, bw: float) -> dict[str, Any]:
    """The trained fixture pair: steps, end-to-end with its drafter, and bf16 near-ties."""
    with tempfile.TemporaryDirectory() as tmp:
        target_dir, drafter_dir = make_fixture_pair(Path(tmp))
        tokenizer = load_tokenizer(target_dir)
        stops = default_stop_ids(target_dir)
        out: dict[str, Any] = {}
        prompts = load_prompts(DEFAULT_PROMPTS, tokenizer, VOCAB_SIZE)[: args.fixture_prompts]
        for dtype in ("float32", "bfloat16"):
            target = load_target(target_dir, device, dtype)
            drafter = load_drafter(drafter_dir, target, device, dtype)
            report = difftest_models(
                target,
                drafter,
                prompts,
                stop_ids=stops,
                tokenizer=tokenizer,
                max_new_tokens=args.fixture_tokens,
                cuda_graphs=True,
            )
            divergences = [r.divergence for r in report.divergences if r.divergence is not None]
            near = [d for d in divergences if d.near_tie]
            out[dtype] = {
                "prompts": len(prompts),
                "divergences": len(report.divergences),
                "near_ties": len(near),
                "hard": len(report.divergences) - len(near),
                "margins": [d.margin for d in divergences],
                "tau": report.tau,
            }
        target = load_target(target_dir, device, args.dtype)  # timed in the shapes' dtype
        drafter = load_drafter(drafter_dir, target, device, args.dtype)
        block = drafter.config.block_size
        budgets = [
            min(p.max_new_tokens or args.fixture_tokens, args.fixture_tokens) for p in prompts
        ]
        longest = max(len(p.ids) for p in prompts)
        with torch.inference_mode():
            runner = GraphRunner(
                target,
                drafter,
                block_sizes=(block,),
                max_len=static_len(longest, max(budgets), target.config.max_position_embeddings),
            )
            context = min(64, runner.target.cache.max_len - block)
            steps = time_steps(runner, context, block, args.iters, runner.captured)
            e2e = end_to_end(
                target,
                runner,
                [list(p.ids) for p in prompts],
                budgets,
                [stops | p.stop_ids for p in prompts],
                block,
                with_drafter=True,
            )
        key = "graph_ms" if runner.captured else "eager_ms"
        moved = step_bytes(target, drafter, context)
        out.update(
            context=context,
            block_size=block,
            steps=steps,
            roofline_ms=rooflines(moved, bw),
            end_to_end=e2e,
            timing_key=key,
            drafter_predicted_speedup=predicted_speedup(e2e["drafter_tau"], steps, key, True),
            drafter_measured_speedup=e2e["drafter_tokens_per_s"] / e2e["ar_tokens_per_s"],
            oracle_predicted_speedup=predicted_speedup(e2e["oracle_tau"], steps, key, False),
            oracle_measured_speedup=e2e["oracle_tokens_per_s"] / e2e["ar_tokens_per_s"],
        )
        return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(results: dict[str, Any]) -> str:
    """One plain-text table of every figure (ms, tokens/s, ratios)."""
    rows = [("model", "measure", "eager", "graph", "roofline / predicted", "ratio")]
    for block in [*results["shapes"], {"shape": "fixture", **results["fixture"]}]:
        name, steps, roof = block["shape"], block["steps"], block["roofline_ms"]
        decode = steps["decode"][block["timing_key"]]
        for step in ("decode", "verify", "draft", "context"):
            best = steps[step][block["timing_key"]]
            rows.append(
                (
                    name,
                    f"{step} step ms",
                    _ms(steps[step]["eager_ms"]),
                    _ms(steps[step]["graph_ms"]),
                    _ms(roof[step]),
                    f"{best / roof[step]:.2f}x roofline, {best / decode:.2f}x decode",
                )
            )
        e2e = block["end_to_end"]

        def placed(value: str, graphed: bool = block["timing_key"] == "graph_ms") -> list[str]:
            return ["", value] if graphed else [value, ""]  # under the column it was run in

        rows.append((name, "AR tokens/s", *placed(f"{e2e['ar_tokens_per_s']:.1f}"), "", ""))
        for kind in ("oracle", "drafter"):
            if f"{kind}_tau" not in e2e:
                continue
            predicted = block[f"{kind}_predicted_speedup"]
            measured = block[f"{kind}_measured_speedup"]
            rows.append(
                (
                    name,
                    f"spec ({kind}) tokens/s, tau {e2e[f'{kind}_tau']:.2f}",
                    *placed(f"{e2e[f'{kind}_tokens_per_s']:.1f}"),
                    "-" if predicted is None else f"{predicted:.2f}x",
                    f"{measured:.2f}x speed-up"
                    + ("" if predicted is None else f", {measured / predicted:.0%} of predicted"),
                )
            )
    for dtype in ("float32", "bfloat16"):
        d = results["fixture"][dtype]
        rows.append(
            (
                "fixture",
                f"{dtype} divergences",
                "",
                "",
                "",
                f"{d['divergences']}/{d['prompts']} prompts: {d['near_ties']} near-ties, "
                f"{d['hard']} hard",
            )
        )
    for goal in results["targets"]:
        rows.append(("target", goal["goal"], "", "", "", goal["verdict"]))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def targets(shapes: list[dict[str, Any]], fixture: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals, judged where graph timings exist: the 8B-shape graph decode step within
    1.25x of its roofline; speculative throughput at least 90% of the predicted speed-up."""
    goals = []
    for block in shapes:
        if block["timing_key"] != "graph_ms":
            continue
        if block["shape"] == "qwen3-8b":
            ratio = block["steps"]["decode"]["graph_ms"] / block["roofline_ms"]["decode"]
            goals.append({"goal": "qwen3-8b graph decode <= 1.25x roofline", "value": ratio})
        share = block["oracle_measured_speedup"] / block["oracle_predicted_speedup"]
        goals.append({"goal": f"{block['shape']} oracle spec >= 90% of predicted", "value": share})
    if fixture["timing_key"] == "graph_ms":
        share = fixture["drafter_measured_speedup"] / fixture["drafter_predicted_speedup"]
        goals.append({"goal": "fixture drafter spec >= 90% of predicted", "value": share})
    for goal in goals:
        met = goal["value"] <= 1.25 if "roofline" in goal["goal"] else goal["value"] >= 0.9
        goal["met"] = met
        goal["verdict"] = f"{'met' if met else 'MISSED'} ({goal['value']:.2f})"
    return goals


def gpu_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU, no results file")
    parser.add_argument("--shapes", default="qwen3-0.6b,qwen3-8b")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--copy-mb", type=int, default=2048)
    parser.add_argument("--fixture-prompts", type=int, default=12)
    parser.add_argument("--fixture-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.shapes, args.context, args.block_size, args.new_tokens = "tiny", 24, 4, 12
        args.iters, args.copy_mb, args.fixture_prompts, args.fixture_tokens = 3, 8, 3, 12
        torch.set_num_threads(1)  # tiny shapes: one thread is fastest and steadiest
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement, as one JSON-ready dict."""
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = getattr(torch, args.dtype)
    bw = copy_bandwidth(device, args.copy_mb)
    shapes = [bench_shape(s, args, device, dtype, bw) for s in args.shapes.split(",") if s]
    fixture = bench_fixture(args, device, bw)
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "dtype": args.dtype,
        "copy_bandwidth_bytes_per_s": bw,
        "shapes": shapes,
        "fixture": fixture,
        "targets": targets(shapes, fixture),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print(
            "bench_cuda: no CUDA device (torch.cuda.is_available() is False); "
            "use --smoke for the CPU dry run",
            file=sys.stderr,
        )
        return 2
    unknown = set(args.shapes.split(",")) - set(SHAPES)
    if unknown:
        print(
            f"bench_cuda: unknown shape(s) {sorted(unknown)}; known: {sorted(SHAPES)}",
            file=sys.stderr,
        )
        return 2
    results = run(args)
    print(
        f"device {results['device']}, {args.dtype}, copy bandwidth "
        f"{results['copy_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s (read + write)"
    )
    print(table(results))
    if not args.smoke:
        path = args.out / f"{gpu_slug(results['device'])}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(results, indent=2, sort_keys=True) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
