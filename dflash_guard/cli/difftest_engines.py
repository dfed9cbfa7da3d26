"""`dflash-guard difftest endpoint|reference|isolation`: the modes that diff live engines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import (
    ApiKeyEnv,
    Candidate,
    Concurrency,
    Dtype,
    FailOnWarning,
    Format,
    Json,
    MaxNewTokens,
    Metrics,
    Model,
    NearTieMargin,
    NoTokenIds,
    Prompts,
    Quiet,
    Threads,
    Timeout,
    chosen_format,
    engine,
)
from dflash_guard.errors import InputError
from dflash_guard.formats import PlainFormat
from dflash_guard.formats.text import difftest as views
from dflash_guard.lossless.defaults import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TIMEOUT_S
from dflash_guard.lossless.prompts import read_prompts
from dflash_guard.near_tie import ENGINE, NEAR_TIE_MARGIN
from kernels_ref.prompts import DEFAULT_PROMPTS


def endpoint(
    baseline: Annotated[str, typer.Option(
        "--baseline", metavar="URL", help="URL of the engine without speculation.")],
    candidate: Candidate, prompts: Prompts = None, model: Model = None,
    max_new_tokens: MaxNewTokens = None, concurrency: Concurrency = 4,
    api_key_env: ApiKeyEnv = None, metrics: Metrics = None,
    near_tie_margin: NearTieMargin = NEAR_TIE_MARGIN[ENGINE],
    timeout: Timeout = DEFAULT_TIMEOUT_S, no_token_ids: NoTokenIds = False,
    fail_on_warning: FailOnWarning = False, output_format: Format = PlainFormat.text,
    as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Two live OpenAI-compatible engines, without and with the drafter.

    Example: dflash-guard difftest endpoint --baseline http://h:8000 --candidate http://h:8001
    """
    import dataclasses

    from dflash_guard.lossless.endpoint import EndpointOptions, run_endpoint_diff

    output_format = chosen_format(output_format, as_json)

    options = EndpointOptions(
        engine(baseline, model=model, api_key_env=api_key_env, timeout=timeout),
        engine(candidate, model=model, api_key_env=api_key_env, timeout=timeout,
               metrics=metrics),
        max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS, concurrency=concurrency,
        near_tie_margin=near_tie_margin, token_ids=not no_token_ids)
    with progress(quiet) as shown:
        report = run_endpoint_diff(options, read_prompts(prompts or DEFAULT_PROMPTS, chat=True),
                                   shown)
    finish(dataclasses.replace(report, fail_on_warning=fail_on_warning), output_format,
           views.render_endpoint)


def reference(
    target: Annotated[Path, typer.Option(
        "--target", metavar="DIR", help="The safetensors target folder kernels_ref decodes.")],
    candidate: Annotated[str, typer.Option(
        "--candidate", metavar="URL", help="URL of the engine under test.")],
    gguf: Annotated[Path | None, typer.Option(
        "--gguf", metavar="FILE",
        help="The GGUF the engine serves (tokenizer check, record).")] = None,
    conversion: Annotated[Path | None, typer.Option(
        "--conversion", metavar="FILE",
        help="Its conversion record (default: GGUF.conversion.json).")] = None,
    record: Annotated[Path | None, typer.Option(
        "--record", metavar="FILE",
        help="Write the GGUF comparison record (in-toto) here.")] = None,
    precision: Annotated[str | None, typer.Option(
        "--precision", metavar="TYPE", help="What the engine serves, for the measured logprob "
        "tolerance: float32, float16, bfloat16, q8_0 (default: the GGUF's, else float32).")
    ] = None,
    max_logprob_delta: Annotated[float | None, typer.Option(
        "--max-logprob-delta", min=0.0, metavar="NATS", help="Largest logprob difference "
        "from kernels_ref allowed (default: the one measured for --precision).")] = None,
    drafter: Annotated[Path | None, typer.Option(
        "--drafter", metavar="DIR", help="The locked drafter: the engine's acceptance over "
        "the diff (its --metrics) must reach kernels_ref's with it.")] = None,
    prompts: Prompts = None, model: Model = None, max_new_tokens: MaxNewTokens = None,
    concurrency: Concurrency = 4, api_key_env: ApiKeyEnv = None, metrics: Metrics = None,
    near_tie_margin: NearTieMargin = NEAR_TIE_MARGIN[ENGINE],
    timeout: Timeout = DEFAULT_TIMEOUT_S, dtype: Dtype = "float32", threads: Threads = None,
    output_format: Format = PlainFormat.text, as_json: Json = False, quiet: Quiet = False,
) -> None:
    """An engine against kernels_ref decoding the safetensors target (GGUF serving).

    Example: dflash-guard difftest reference --target t/ --candidate http://h:8080 --gguf t.gguf
    """
    from dflash_guard.lossless.options import ReferenceOptions
    from dflash_guard.lossless.reference_diff import run_reference_diff, write_reference_record
    from dflash_guard.outputs import refuse_outputs_over_inputs

    output_format = chosen_format(output_format, as_json)

    if record is not None and not record.parent.is_dir():
        raise InputError(f"--record {record}: folder {record.parent} does not exist")
    refuse_outputs_over_inputs([("--record", record)], [
        ("--target", target), ("--gguf", gguf), ("--conversion", conversion),
        ("--prompts", prompts), ("--drafter", drafter)])
    options = ReferenceOptions(
        target, engine(candidate, model=model, api_key_env=api_key_env, timeout=timeout,
                       metrics=metrics), gguf=gguf, conversion=conversion, prompts=prompts,
        max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS, concurrency=concurrency,
        near_tie_margin=near_tie_margin, dtype=dtype, threads=threads, precision=precision,
        max_logprob_delta=max_logprob_delta, drafter=drafter)
    with progress(quiet) as shown:
        report = run_reference_diff(options, shown)
        if record is not None:
            write_reference_record(options, report, record, shown)
    finish(report, output_format, views.render_reference)


def isolation(
    candidate: Candidate, prompts: Prompts = None, model: Model = None,
    max_new_tokens: MaxNewTokens = None,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", metavar="N", min=2, help="Requests in flight (other tenants).")] = 4,
    api_key_env: ApiKeyEnv = None, near_tie_margin: NearTieMargin = NEAR_TIE_MARGIN[ENGINE],
    timeout: Timeout = DEFAULT_TIMEOUT_S, no_token_ids: NoTokenIds = False,
    output_format: Format = PlainFormat.text, as_json: Json = False, quiet: Quiet = False,
) -> None:
    """One engine: each prompt alone, then among prefix-sharing tenants; outputs must match.

    Example: dflash-guard difftest isolation --candidate http://h:8001
    """
    from dflash_guard.lossless.isolation import IsolationOptions, run_isolation_diff

    output_format = chosen_format(output_format, as_json)

    options = IsolationOptions(
        engine(candidate, model=model, api_key_env=api_key_env, timeout=timeout),
        max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS, concurrency=concurrency,
        near_tie_margin=near_tie_margin, token_ids=not no_token_ids)
    with progress(quiet) as shown:
        report = run_isolation_diff(options, read_prompts(prompts or DEFAULT_PROMPTS), shown)
    finish(report, output_format, views.render_isolation)


def register(app: typer.Typer) -> None:
    """Add the three engine modes to the `difftest` app."""
    app.command("endpoint")(endpoint)
    app.command("reference")(reference)
    app.command("isolation")(isolation)
