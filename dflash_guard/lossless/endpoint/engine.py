"""`EngineEndpoint`: how to reach one live OpenAI-compatible engine, built once and shared.

The endpoint, reference and isolation diffs, `bench`, `monitor` and the gate all talk to engines
through it: the base URL, the served model, the API key (never in a repr; `key_source` names the
environment variable it came from), the timeout and retries, and the engine's Prometheus
`/metrics` URL when its acceptance is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dflash_guard.errors import InputError
from dflash_guard.lossless.defaults import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S
from dflash_guard.lossless.endpoint.client import (
    CompletionClient,
    http_url_parts,
    read_api_key,
    redact_url,
)


@dataclass(frozen=True)
class EngineEndpoint:
    """One engine: URL, model, API key and its source, timeout, retries, metrics URL."""

    url: str
    model: str | None = None  # served model name; None: the server's first model
    api_key: str | None = field(default=None, repr=False)
    key_source: str | None = None  # the environment variable the key was read from
    timeout: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    backoff: float = 0.5
    metrics_url: str | None = None  # the engine's Prometheus endpoint

    def __post_init__(self) -> None:
        http_url_parts(self.url)
        if self.metrics_url:
            http_url_parts(self.metrics_url)
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0:
            raise InputError("the timeout must be positive, retries and backoff not negative")

    @classmethod
    def from_env(cls, url: str, *, api_key_env: str | None = None, model: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, retries: int = DEFAULT_RETRIES,
                 metrics_url: str | None = None) -> EngineEndpoint:
        """The endpoint at `url` with its API key read from `api_key_env` (when named)."""
        return cls(url, model=model, api_key=read_api_key(api_key_env), key_source=api_key_env,
                   timeout=timeout, retries=retries, metrics_url=metrics_url)

    @property
    def shown_url(self) -> str:
        """The URL as reports show it: without credentials or query."""
        return redact_url(self.url)

    def client(self, name: str, *, token_ids: bool = True, pool_size: int = 8
               ) -> CompletionClient:
        """A `/v1/completions` client for this engine (`name` appears in its messages)."""
        return CompletionClient(name, self.url, api_key=self.api_key, timeout=self.timeout,
                                retries=self.retries, backoff=self.backoff, token_ids=token_ids,
                                pool_size=pool_size)
