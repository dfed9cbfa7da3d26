"""Command-line options several commands share (the difftest modes above all, and `--quiet` on
every command that does long work), and the one place an `EngineEndpoint` is built from
flags."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dflash_guard.errors import InputError
from dflash_guard.formats import PlainFormat
from dflash_guard.lossless.defaults import DEFAULT_RETRIES

if TYPE_CHECKING:  # the endpoint client imports an HTTP stack: `scan` and `lock` do not pay it
    from dflash_guard.lossless.endpoint.engine import EngineEndpoint
    from dflash_guard.trust.policy import Signers

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
Threads = Annotated[int | None, typer.Option(
    "--threads", min=1, help="Torch CPU threads for kernels_ref (default: chosen from the model's "
    "size and the free cores).")]
Format = Annotated[PlainFormat, typer.Option("--format", help="text or json.")]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress on stderr (errors still go there).")]
FailOnWarning = Annotated[bool, typer.Option(
    "--fail-on-warning", help="Exit 1 on an acceptance warning too.")]
Candidate = Annotated[str, typer.Option(
    "--candidate", help="URL of the engine with the DFlash drafter.")]
Model = Annotated[str | None, typer.Option(
    "--model", help="Served model name (default: the server's first).")]
Concurrency = Annotated[int, typer.Option("--concurrency", min=1,
                                          help="Requests in flight on each engine.")]
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


def engine(url: str, *, model: str | None, api_key_env: str | None, timeout: float,
           metrics: str | None = None, retries: int = DEFAULT_RETRIES) -> EngineEndpoint:
    """The engine at `url` as the flags describe it (its API key read from `api_key_env`)."""
    from dflash_guard.lossless.endpoint.engine import EngineEndpoint

    return EngineEndpoint.from_env(url, api_key_env=api_key_env, model=model, timeout=timeout,
                                   retries=retries, metrics_url=metrics)


PublicKeys = Annotated[list[Path] | None, typer.Option(
    "--public-key", help="Also accept signatures by this ECDSA public key (PEM; repeatable), as "
                         "cosign's --key does.")]
Identities = Annotated[list[str] | None, typer.Option(
    "--identity", "--cert-identity", help="Also accept signatures by this Sigstore identity "
                                          "(repeatable; with --issuer).")]
Issuer = Annotated[str | None, typer.Option(
    "--issuer", "--cert-oidc-issuer", help="The OIDC issuer of the --identity signers.")]


def extra_signers(public_keys: list[Path] | None, identities: list[str] | None,
                  issuer: str | None) -> Signers:
    """The signers the operator accepts on the command line, beside the policy's."""
    from dflash_guard.trust.policy import Identity, Signers

    if identities and not issuer:
        raise InputError("--identity needs --issuer (the signer's OIDC issuer URL)")
    if issuer and not identities:
        raise InputError("--issuer needs --identity (the signer's certificate identity)")
    for key in public_keys or ():
        if not key.is_file():
            raise InputError(f"--public-key {key}: no such file")
    return Signers(tuple(Identity(i, issuer or "") for i in identities or ()),
                   tuple(public_keys or ()))
