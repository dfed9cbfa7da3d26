"""Diff-test two live OpenAI-compatible engines: a baseline (no speculation) against a candidate.

Both endpoints get the same prompts through `/v1/completions` at temperature 0 with `logprobs`
(`client`); the generated tokens are compared one prompt at a time (`compare`): token ids when
the server offers them (vLLM: `return_token_ids` gives `choices[].token_ids`,
`return_tokens_as_token_ids` writes logprob tokens as `token_id:N`), otherwise the token strings,
otherwise the text. Optionally the candidate's Prometheus `/metrics` are read before and after the
run to report the acceptance it achieved (`metrics`). `run` ties them together; `engine` holds
the one `EngineEndpoint` type every engine-facing command builds.
"""

from dflash_guard.lossless.defaults import DEFAULT_TIMEOUT_S
from dflash_guard.lossless.endpoint.client import (
    CompletionClient,
    EndpointError,
    completions_url,
    parse_completion,
    read_api_key,
    redact_url,
)
from dflash_guard.lossless.endpoint.compare import compare_completions
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.lossless.endpoint.metrics import (
    acceptance_from_metrics,
    acceptance_warnings,
    parse_prometheus,
)
from dflash_guard.lossless.endpoint.run import (
    EndpointDiffReport,
    EndpointOptions,
    run_endpoint_diff,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "CompletionClient",
    "EndpointDiffReport",
    "EndpointError",
    "EndpointOptions",
    "EngineEndpoint",
    "acceptance_from_metrics",
    "acceptance_warnings",
    "compare_completions",
    "completions_url",
    "parse_completion",
    "parse_prometheus",
    "read_api_key",
    "redact_url",
    "run_endpoint_diff",
]
