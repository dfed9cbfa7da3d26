"""`dflash-guard difftest MODE`: speculative output must equal the target's own, in five modes.

`local` and `sampled` run the reference runner on a model pair; `endpoint`, `reference` and
`isolation` talk to live engines (`EngineEndpoint`). Each mode takes only its own flags.
"""

from __future__ import annotations

from typing import Annotated

import typer

from dflash_guard.cli import difftest_engines
from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import (
    BlockSize,
    Device,
    Drafter,
    Dtype,
    FailOnWarning,
    Format,
    Json,
    MaxNewTokens,
    Prompts,
    Quiet,
    Target,
    Threads,
    chosen_format,
)
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text import difftest as views
from dflash_guard.lossless.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_RUNNER_SAMPLES,
    DEFAULT_RUNNER_TOKENS,
)
from dflash_guard.lossless.reference import parse_fault
from kernels_ref.faults import Fault

app = typer.Typer(
    name="difftest", no_args_is_help=True,
    help="Diff-test losslessness: speculative output must equal the target's own.\n\n"
         "Exit 0 passed, 1 a divergence (or a refused GGUF, or a warning with "
         "--fail-on-warning), 2 an input or endpoint error.",
)
difftest_engines.register(app)


@app.command("local")
def local(
    target: Target, drafter: Drafter, prompts: Prompts = None,
    max_new_tokens: MaxNewTokens = None, block_size: BlockSize = None,
    device: Device = "cpu", dtype: Dtype = "float32", threads: Threads = None,
    inject: Annotated[str | None, typer.Option(
        "--inject", metavar="FAULT", help="Plant a known engine bug: "
        + ", ".join(f for f in Fault if f.greedy) + ".")] = None,
    cuda_graphs: Annotated[bool, typer.Option(
        "--cuda-graphs", help="Replay the decode steps as CUDA graphs (cuda).")] = False,
    fail_on_warning: FailOnWarning = False, output_format: Format = PlainFormat.text,
    as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Greedy speculative vs autoregressive decoding on the reference runner.

    Example: dflash-guard difftest local --target pair/target --drafter pair/drafter
    """
    import dataclasses

    from dflash_guard.lossless.local import run_difftest
    from dflash_guard.lossless.options import LocalOptions

    output_format = chosen_format(output_format, as_json)

    options = LocalOptions(target, drafter, prompts=prompts, max_new_tokens=max_new_tokens,
                           block_size=block_size, device=device, dtype=dtype,
                           inject=parse_fault(inject), cuda_graphs=cuda_graphs, threads=threads)
    with progress(quiet) as shown:
        report = run_difftest(options, shown)
    finish(dataclasses.replace(report, fail_on_warning=fail_on_warning), output_format,
           views.render_local)


@app.command("sampled")
def sampled(
    target: Target, drafter: Drafter, prompts: Prompts = None,
    samples: Annotated[int, typer.Option(
        "--samples", metavar="N", min=1,
        help="Draws per prompt and side.")] = DEFAULT_RUNNER_SAMPLES,
    sample_tokens: Annotated[int, typer.Option(
        "--sample-tokens", metavar="N", min=1, help="Tokens per draw, compared jointly.")
    ] = DEFAULT_RUNNER_TOKENS,
    temperature: Annotated[float, typer.Option("--temperature", metavar="T", min=0.0)] = 1.0,
    top_k: Annotated[int | None, typer.Option("--top-k", metavar="K", min=1)] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", metavar="P", min=0.0, max=1.0)] = None,
    alpha: Annotated[float, typer.Option(
        "--alpha", metavar="ALPHA", help="Family-wise false-alarm rate.")] = DEFAULT_ALPHA,
    seed: Annotated[int, typer.Option("--seed", metavar="N")] = 0,
    inject: Annotated[str | None, typer.Option(
        "--inject", metavar="FAULT", help="Plant a sampler bug: "
        + ", ".join(f for f in Fault if f.sampling) + ".")] = None,
    block_size: BlockSize = None, device: Device = "cpu", dtype: Dtype = "float32",
    threads: Threads = None,
    output_format: Format = PlainFormat.text, as_json: Json = False, quiet: Quiet = False,
) -> None:
    """Sampled speculative decoding must draw from the target's law (chi-square tests).

    Example: dflash-guard difftest sampled --target pair/target --drafter pair/drafter
    """
    from dflash_guard.lossless.options import SampledOptions
    from dflash_guard.lossless.sampled import run_sampled_difftest

    output_format = chosen_format(output_format, as_json)

    options = SampledOptions(
        target, drafter, prompts=prompts, samples=samples, sample_tokens=sample_tokens,
        temperature=temperature, top_k=top_k, top_p=top_p, alpha=alpha, seed=seed,
        inject=parse_fault(inject), block_size=block_size, device=device, dtype=dtype,
        threads=threads)
    with progress(quiet) as shown:
        report = run_sampled_difftest(options, shown)
    finish(report, output_format, views.render_sampled)


def register(root: typer.Typer) -> None:
    """Add `difftest` and its five modes to `root`."""
    root.add_typer(app, name="difftest")
