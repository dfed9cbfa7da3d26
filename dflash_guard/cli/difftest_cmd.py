"""`dflash-guard difftest MODE`: speculative output must equal the target's own, in five modes.

`local` and `sampled` run the reference runner on a model pair; `endpoint`, `reference` and
`isolation` talk to live engines (`EngineEndpoint`). Each mode takes only its own flags. The
old single-command spelling (`difftest --target ...`, `--baseline`, `--reference`,
`--isolation`, `--sampled`) still works for one release: `upgrade_args` rewrites it to the mode
and says so on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, progress
from dflash_guard.errors import InputError
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text import difftest as views
from dflash_guard.lossless.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_PROMPTS,
    DEFAULT_RUNNER_SAMPLES,
    DEFAULT_RUNNER_TOKENS,
)
from dflash_guard.lossless.endpoint.client import DEFAULT_TIMEOUT_S
from dflash_guard.lossless.endpoint.compare import DEFAULT_NEAR_TIE_MARGIN
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.prompts import read_prompts
from dflash_guard.lossless.reference import parse_fault
from kernels_ref.faults import Fault

MODES = ("local", "sampled", "endpoint", "reference", "isolation")

Target = Annotated[Path, typer.Option("--target", help="Target model folder (HF layout).")]
Drafter = Annotated[Path, typer.Option("--drafter", help="DFlash drafter folder (HF layout).")]
Prompts = Annotated[Path | None, typer.Option(
    "--prompts", help="JSONL prompt set (default: the shipped set).")]
MaxNewTokens = Annotated[int | None, typer.Option(
    "--max-new-tokens", min=1, help="Token budget (caps per-prompt budgets).")]
BlockSize = Annotated[int | None, typer.Option(
    "--block-size", min=1, help="Draft block size (default: the drafter's).")]
Device = Annotated[str, typer.Option("--device", help="cpu or cuda.")]
Dtype = Annotated[str, typer.Option("--dtype", help="float32, float64 or bfloat16.")]
Format = Annotated[PlainFormat, typer.Option("--format", help="text or json.")]
FailOnWarning = Annotated[bool, typer.Option(
    "--fail-on-warning", help="Exit 1 on an acceptance warning too.")]
Candidate = Annotated[str, typer.Option(
    "--candidate", help="URL of the engine with the DFlash drafter.")]
Model = Annotated[str | None, typer.Option(
    "--model", help="Served model name (default: the server's first).")]
Concurrency = Annotated[int, typer.Option("--concurrency", min=1, help="Prompts in flight.")]
ApiKeyEnv = Annotated[str | None, typer.Option(
    "--api-key-env", help="Environment variable holding the API key.")]
Metrics = Annotated[str | None, typer.Option(
    "--metrics", help="The engine's Prometheus /metrics URL (acceptance).")]
NearTieMargin = Annotated[float, typer.Option(
    "--near-tie-margin", min=0.0, help="Top-2 logprob margin (nats) of a near-tie.")]
Timeout = Annotated[float, typer.Option(
    "--timeout", min=0.001, help="Per-request timeout in seconds.")]
NoTokenIds = Annotated[bool, typer.Option(
    "--no-token-ids", help="Plain OpenAI: ask for no vLLM token-id fields.")]

app = typer.Typer(
    name="difftest", no_args_is_help=True,
    help="Diff-test losslessness: speculative output must equal the target's own.\n\n"
         "Exit 0 passed, 1 a divergence (or a refused GGUF, or a warning with "
         "--fail-on-warning), 2 an input or endpoint error.",
)


def _engine(url: str, *, model: str | None, api_key_env: str | None, timeout: float,
            metrics: str | None = None) -> EngineEndpoint:
    return EngineEndpoint.from_env(url, api_key_env=api_key_env, model=model, timeout=timeout,
                                   metrics_url=metrics)


@app.command("local")
def local(
    target: Target, drafter: Drafter, prompts: Prompts = None,
    max_new_tokens: MaxNewTokens = None, block_size: BlockSize = None,
    device: Device = "cpu", dtype: Dtype = "float32",
    inject: Annotated[str | None, typer.Option(
        "--inject", help="Plant a known engine bug: "
        + ", ".join(f for f in Fault if f.greedy) + ".")] = None,
    cuda_graphs: Annotated[bool, typer.Option(
        "--cuda-graphs", help="Replay the decode steps as CUDA graphs (cuda).")] = False,
    fail_on_warning: FailOnWarning = False, output_format: Format = PlainFormat.text,
) -> None:
    """Greedy speculative vs autoregressive decoding on the reference runner.

    Example: dflash-guard difftest local --target out/target --drafter out/drafter
    """
    import dataclasses

    from dflash_guard.lossless.local import run_difftest
    from dflash_guard.lossless.options import LocalOptions

    options = LocalOptions(target, drafter, prompts=prompts, max_new_tokens=max_new_tokens,
                           block_size=block_size, device=device, dtype=dtype,
                           inject=parse_fault(inject), cuda_graphs=cuda_graphs)
    progress(f"diff-testing {drafter} against {target} ...", output_format)
    report = dataclasses.replace(run_difftest(options), fail_on_warning=fail_on_warning)
    finish(report, output_format, views.render_local)


@app.command("sampled")
def sampled(
    target: Target, drafter: Drafter, prompts: Prompts = None,
    samples: Annotated[int, typer.Option(
        "--samples", min=1, help="Draws per prompt and side.")] = DEFAULT_RUNNER_SAMPLES,
    sample_tokens: Annotated[int, typer.Option(
        "--sample-tokens", min=1, help="Tokens per draw, compared jointly.")
    ] = DEFAULT_RUNNER_TOKENS,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0)] = 1.0,
    top_k: Annotated[int | None, typer.Option("--top-k", min=1)] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", min=0.0, max=1.0)] = None,
    alpha: Annotated[float, typer.Option(
        "--alpha", help="Family-wise false-alarm rate.")] = DEFAULT_ALPHA,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    inject: Annotated[str | None, typer.Option(
        "--inject", help="Plant a sampler bug: "
        + ", ".join(f for f in Fault if f.sampling) + ".")] = None,
    block_size: BlockSize = None, device: Device = "cpu", dtype: Dtype = "float32",
    output_format: Format = PlainFormat.text,
) -> None:
    """Sampled speculative decoding must draw from the target's law (chi-square tests).

    Example: dflash-guard difftest sampled --target out/target --drafter out/drafter
    """
    from dflash_guard.lossless.options import SampledOptions
    from dflash_guard.lossless.sampled import run_sampled_difftest

    options = SampledOptions(
        target, drafter, prompts=prompts, samples=samples, sample_tokens=sample_tokens,
        temperature=temperature, top_k=top_k, top_p=top_p, alpha=alpha, seed=seed,
        inject=parse_fault(inject), block_size=block_size, device=device, dtype=dtype)
    progress(f"sampling {samples} draws per prompt and side ...", output_format)
    finish(run_sampled_difftest(options), output_format, views.render_sampled)


@app.command("endpoint")
def endpoint(
    baseline: Annotated[str, typer.Option(
        "--baseline", help="URL of the engine without speculation.")],
    candidate: Candidate, prompts: Prompts = None, model: Model = None,
    max_new_tokens: MaxNewTokens = None, concurrency: Concurrency = 4,
    api_key_env: ApiKeyEnv = None, metrics: Metrics = None,
    near_tie_margin: NearTieMargin = DEFAULT_NEAR_TIE_MARGIN,
    timeout: Timeout = DEFAULT_TIMEOUT_S, no_token_ids: NoTokenIds = False,
    fail_on_warning: FailOnWarning = False, output_format: Format = PlainFormat.text,
) -> None:
    """Two live OpenAI-compatible engines, without and with the drafter.

    Example: dflash-guard difftest endpoint --baseline http://h:8000 --candidate http://h:8001
    """
    import dataclasses

    from dflash_guard.lossless.endpoint import EndpointOptions, run_endpoint_diff

    settings = dict(model=model, api_key_env=api_key_env, timeout=timeout)
    options = EndpointOptions(
        _engine(baseline, **settings), _engine(candidate, **settings, metrics=metrics),
        max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS, concurrency=concurrency,
        near_tie_margin=near_tie_margin, token_ids=not no_token_ids)
    report = run_endpoint_diff(options, read_prompts(prompts or DEFAULT_PROMPTS))
    report = dataclasses.replace(report, fail_on_warning=fail_on_warning)
    finish(report, output_format, views.render_endpoint)


@app.command("reference")
def reference(
    target: Annotated[Path, typer.Option(
        "--target", help="The safetensors target folder kernels_ref decodes.")],
    candidate: Annotated[str, typer.Option("--candidate", help="URL of the engine under test.")],
    gguf: Annotated[Path | None, typer.Option(
        "--gguf", help="The GGUF the engine serves (tokenizer check, record).")] = None,
    conversion: Annotated[Path | None, typer.Option(
        "--conversion", help="Its conversion record (default: GGUF.conversion.json).")] = None,
    record: Annotated[Path | None, typer.Option(
        "--record", help="Write the GGUF comparison record (in-toto) here.")] = None,
    prompts: Prompts = None, model: Model = None, max_new_tokens: MaxNewTokens = None,
    concurrency: Concurrency = 4, api_key_env: ApiKeyEnv = None, metrics: Metrics = None,
    near_tie_margin: NearTieMargin = DEFAULT_NEAR_TIE_MARGIN,
    timeout: Timeout = DEFAULT_TIMEOUT_S, dtype: Dtype = "float32",
    output_format: Format = PlainFormat.text,
) -> None:
    """An engine against kernels_ref decoding the safetensors target (GGUF serving).

    Example: dflash-guard difftest reference --target t/ --candidate http://h:8080 --gguf t.gguf
    """
    from dflash_guard.lossless.options import ReferenceOptions
    from dflash_guard.lossless.reference_diff import run_reference_diff, write_reference_record

    if record is not None and not record.parent.is_dir():
        raise InputError(f"--record {record}: folder {record.parent} does not exist")
    engine = _engine(candidate, model=model, api_key_env=api_key_env, timeout=timeout,
                     metrics=metrics)
    options = ReferenceOptions(
        target, engine, gguf=gguf, conversion=conversion, prompts=prompts,
        max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS, concurrency=concurrency,
        near_tie_margin=near_tie_margin, dtype=dtype)
    progress(f"decoding with kernels_ref from {target} and with the engine ...", output_format)
    report = run_reference_diff(options)
    if record is not None:
        write_reference_record(options, report, record)
        progress(f"wrote {record}", output_format)
    finish(report, output_format, views.render_reference)


@app.command("isolation")
def isolation(
    candidate: Candidate, prompts: Prompts = None, model: Model = None,
    max_new_tokens: MaxNewTokens = None,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", min=2, help="Requests in flight (other tenants).")] = 4,
    api_key_env: ApiKeyEnv = None, near_tie_margin: NearTieMargin = DEFAULT_NEAR_TIE_MARGIN,
    timeout: Timeout = DEFAULT_TIMEOUT_S, no_token_ids: NoTokenIds = False,
    output_format: Format = PlainFormat.text,
) -> None:
    """One engine: each prompt alone, then among prefix-sharing tenants; outputs must match.

    Example: dflash-guard difftest isolation --candidate http://h:8001
    """
    from dflash_guard.lossless.isolation import IsolationOptions, run_isolation_diff

    options = IsolationOptions(
        _engine(candidate, model=model, api_key_env=api_key_env, timeout=timeout),
        max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS, concurrency=concurrency,
        near_tie_margin=near_tie_margin, token_ids=not no_token_ids)
    report = run_isolation_diff(options, read_prompts(prompts or DEFAULT_PROMPTS))
    finish(report, output_format, views.render_isolation)


def upgrade_args(args: list[str]) -> list[str]:
    """`difftest --FLAGS` (the deprecated one-command spelling) as `difftest MODE --FLAGS`, with
    a warning on stderr; any other command line unchanged."""
    at = args.index("difftest") if "difftest" in args else -1
    rest = args[at + 1:]
    if at < 0 or not rest or not rest[0].startswith("-") or rest[0] in ("--help", "-h"):
        return args
    names = {arg.split("=", 1)[0] for arg in rest}
    if "--isolation" in names:
        mode, rest = "isolation", [a for a in rest if a != "--isolation"]
    elif "--reference" in names:
        mode = "reference"
        rest = [a.replace("--reference", "--target", 1) if a.split("=", 1)[0] == "--reference"
                else a for a in rest]
    elif "--sampled" in names:
        mode, rest = "sampled", [a for a in rest if a != "--sampled"]
    elif names & {"--baseline", "--candidate"}:
        mode = "endpoint"
    else:
        mode = "local"
    sys.stderr.write(f"warning: `difftest --FLAGS` is deprecated (removed in the next release):"
                     f" run `dflash-guard difftest {mode} ...`\n")
    return [*args[:at + 1], mode, *rest]


def register(root: typer.Typer) -> None:
    """Add `difftest` and its five modes to `root`."""
    root.add_typer(app, name="difftest")
