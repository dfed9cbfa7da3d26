"""Command-line options several commands share (the difftest modes above all, and `--quiet` on
every command that does long work), and the one place an `EngineEndpoint` is built from
flags."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from dflash_guard.errors import InputError
from dflash_guard.formats import OutputFormat, PlainFormat
from dflash_guard.lossless.defaults import DEFAULT_RETRIES
from dflash_guard.severity import Severity

if TYPE_CHECKING:  # the endpoint client imports an HTTP stack: `scan` and `lock` do not pay it
    from dflash_guard.lossless.endpoint.engine import EngineEndpoint
    from dflash_guard.trust.policy import Signers

Target = Annotated[Path, typer.Option("--target", metavar="DIR",
                                      help="Target model folder (HF layout).")]
Drafter = Annotated[Path, typer.Option("--drafter", metavar="DIR",
                                       help="DFlash drafter folder (HF layout).")]
Prompts = Annotated[Path | None, typer.Option(
    "--prompts", metavar="JSONL", help="JSONL prompt set (default: the shipped set).")]
MaxNewTokens = Annotated[int | None, typer.Option(
    "--max-new-tokens", metavar="N", min=1, help="Token budget (caps per-prompt budgets).")]
BlockSize = Annotated[int | None, typer.Option(
    "--block-size", metavar="N", min=1, help="Draft block size (default: the drafter's).")]
Device = Annotated[str, typer.Option("--device", metavar="[cpu|cuda]", help="cpu or cuda.")]
Dtype = Annotated[str, typer.Option("--dtype", metavar="DTYPE",
                                    help="float32, float64 or bfloat16.")]
Threads = Annotated[int | None, typer.Option(
    "--threads", metavar="N", min=1,
    help="Torch CPU threads for kernels_ref (default: chosen from the model's "
         "size and the free cores).")]
Format = Annotated[PlainFormat, typer.Option("--format", metavar="[text|json]",
                                             help="text or json.")]
Json = Annotated[bool, typer.Option("--json", help="Same as --format json.")]
LockPath = Annotated[Path, typer.Option("--lock", metavar="FILE",
                                       help="The lockfile (default: dflash.lock).")]
Roots = Annotated[list[str] | None, typer.Option(
    "--root", metavar="ROLE=DIR",
    help="ROLE=DIR: where that artifact lives (repeatable; a Hub artifact not given is read "
         "from the HF cache).")]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress on stderr (errors still go there).")]
FailOnWarning = Annotated[bool, typer.Option(
    "--fail-on-warning", help="Exit 1 on an acceptance warning too.")]
Candidate = Annotated[str, typer.Option(
    "--candidate", metavar="URL", help="URL of the engine with the DFlash drafter.")]
Model = Annotated[str | None, typer.Option(
    "--model", metavar="NAME", help="Served model name (default: the server's first).")]
Concurrency = Annotated[int, typer.Option("--concurrency", metavar="N", min=1,
                                          help="Requests in flight on each engine.")]
ApiKeyEnv = Annotated[str | None, typer.Option(
    "--api-key-env", metavar="VAR", help="Environment variable holding the API key.")]
Metrics = Annotated[str | None, typer.Option(
    "--metrics", metavar="URL", help="The engine's Prometheus /metrics URL (acceptance).")]
NearTieMargin = Annotated[float, typer.Option(
    "--near-tie-margin", metavar="NATS", min=0.0,
    help="Top-2 logprob margin (nats) of a near-tie.")]
Timeout = Annotated[float, typer.Option(
    "--timeout", metavar="SECONDS", min=0.001, help="Per-request timeout in seconds.")]
NoTokenIds = Annotated[bool, typer.Option(
    "--no-token-ids", help="Plain OpenAI: ask for no vLLM token-id fields.")]


F = TypeVar("F", PlainFormat, OutputFormat)


def chosen_format(fmt: F, as_json: bool) -> F:
    """The report format `--format` and `--json` ask for (`--json` is `--format json`)."""
    if not as_json:
        return fmt
    if fmt.value not in ("text", "json"):
        raise InputError(f"--json and --format {fmt.value}: give one of them")
    return type(fmt)("json")


def engine(url: str, *, model: str | None, api_key_env: str | None, timeout: float,
           metrics: str | None = None, retries: int = DEFAULT_RETRIES) -> EngineEndpoint:
    """The engine at `url` as the flags describe it (its API key read from `api_key_env`)."""
    from dflash_guard.lossless.endpoint.engine import EngineEndpoint

    return EngineEndpoint.from_env(url, api_key_env=api_key_env, model=model, timeout=timeout,
                                   retries=retries, metrics_url=metrics)


PublicKeys = Annotated[list[Path] | None, typer.Option(
    "--public-key", metavar="PEM",
    help="Also accept signatures by this ECDSA public key (PEM; repeatable), as "
         "cosign's --key does.")]
Identities = Annotated[list[str] | None, typer.Option(
    "--identity", "--cert-identity", "--certificate-identity", metavar="IDENTITY",
    help="Also accept signatures by this Sigstore identity "
         "(repeatable; with --issuer).")]
IdentityRegexps = Annotated[list[str] | None, typer.Option(
    "--identity-regexp", "--certificate-identity-regexp", metavar="REGEX",
    help="Also accept a Sigstore identity this regular expression matches, whole (anchored, "
         "unlike cosign's; repeatable; with --issuer).")]
Issuer = Annotated[str | None, typer.Option(
    "--issuer", "--cert-oidc-issuer", "--certificate-oidc-issuer", metavar="URL",
    help="The OIDC issuer of the --identity signers.")]
TrustRoot = Annotated[Path | None, typer.Option(
    "--trust-root", "--trusted-root", metavar="JSON",
    help="Sigstore trusted root (JSON): verify offline.")]
Offline = Annotated[bool, typer.Option(
    "--offline", help="Verify Sigstore signatures offline, with --trust-root or else the "
                      "trusted root the sigstore package ships (no TUF refresh).")]
BundleFile = Annotated[Path | None, typer.Option(
    "--bundle", metavar="FILE",
    help="The signature bundle to check (key or Sigstore), instead of the ones found beside "
         "the signed file.")]


def extra_signers(public_keys: list[Path] | None, identities: list[str] | None,
                  issuer: str | None, regexps: list[str] | None = None) -> Signers:
    """The signers the operator accepts on the command line, beside the policy's."""
    import re

    from dflash_guard.trust.policy import Identity, Signers

    if (identities or regexps) and not issuer:
        raise InputError("--identity needs --issuer (the signer's OIDC issuer URL)")
    if issuer and not (identities or regexps):
        raise InputError("--issuer needs --identity (the signer's certificate identity)")
    for pattern in regexps or ():
        try:
            re.compile(pattern)
        except re.error as error:
            raise InputError(f"--identity-regexp {pattern!r}: {error}") from None
    for key in public_keys or ():
        if not key.is_file():
            raise InputError(f"--public-key {key}: no such file")
    return Signers((*(Identity(i, issuer or "") for i in identities or ()),
                    *(Identity(r, issuer or "", regexp=True) for r in regexps or ())),
                   tuple(public_keys or ()))


def trusted_root(trust_root: Path | None, offline: bool) -> Path | None:
    """The Sigstore trusted root `--trust-root` and `--offline` ask for (None: fetch it)."""
    if trust_root is not None or not offline:
        return trust_root
    from dflash_guard.trust.signing import production_trust_root

    return production_trust_root()


PassphraseEnv = Annotated[str, typer.Option(
    "--passphrase-env", metavar="VAR",
    help="For an encrypted --key: the environment variable holding its passphrase (cosign's "
         "COSIGN_PASSWORD by default); unset, it is asked on the terminal.")]


def key_passphrase(env_var: str) -> Callable[[], str]:
    """How an encrypted private key's passphrase is obtained, asked only when one is needed:
    from the environment variable `env_var`, else a hidden prompt when stdin is a terminal."""

    asked: list[str] = []  # asked once: the gate opens the key before its checks and after

    def ask() -> str:
        if asked:
            return asked[0]
        value = os.environ.get(env_var)
        if value is None and not sys.stdin.isatty():
            raise InputError(f"the --key is encrypted: set {env_var} to its passphrase (or run "
                             "on a terminal to be asked)")
        if value is None:
            value = str(typer.prompt("Passphrase of the private key", hide_input=True, err=True))
        asked.append(value)
        return value

    return ask


SEVERITY_METAVAR = "[" + "|".join(Severity.names()) + "]"


def parse_roots(specs: list[str]) -> dict[str, Path]:
    """`ROLE=DIR` options -> {role: Path}."""
    from dflash_guard.pins.lockfile import ROLES

    roots: dict[str, Path] = {}
    for spec in specs:
        role, sep, folder = spec.partition("=")
        if not sep or role not in ROLES or not folder:
            raise InputError(
                f"--root {spec!r}: expected ROLE=DIR with ROLE one of {', '.join(ROLES)}"
            )
        if role in roots:
            raise InputError(f"--root {role}: given twice")
        roots[role] = Path(folder).expanduser()
    return roots


def parse_clones(specs: list[str]) -> dict[str, Path]:
    """`NAME=PATH` options -> {name: Path}; NAME is a locked engine's name or a Hub ORG/NAME."""
    clones: dict[str, Path] = {}
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep or not name or not folder:
            raise InputError(f"--engine-repo {spec!r}: expected NAME=PATH (a local git clone)")
        if name in clones:
            raise InputError(f"--engine-repo {name}: given twice")
        clones[name] = Path(folder).expanduser()
    return clones
