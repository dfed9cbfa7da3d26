"""Defaults of the diff tests, kept free of torch so the CLI can show them without loading it
(the default prompt set is `kernels_ref.prompts.DEFAULT_PROMPTS`)."""

DEFAULT_MAX_NEW_TOKENS = 64
DEFAULT_ALPHA = 0.01  # family-wise false-alarm rate of the sampled check
DEFAULT_RUNNER_SAMPLES = 400  # draws per prompt and side in the sampled check
DEFAULT_RUNNER_TOKENS = 4  # tokens per draw compared jointly
DEFAULT_TIMEOUT_S = 60.0  # per request to an engine
DEFAULT_RETRIES = 4  # on HTTP 429/503
