"""The catalogue of engine bugs `--inject` can plant, for proving the diff tests catch them.

Torch-free, so the CLI can list the names without importing torch.
"""

FAULTS: dict[str, str] = {
    "accept-off-by-one": "one draft token more than matched is accepted",
    "no-cumprod": "matches are counted, not prefixed: a later match is accepted after a mismatch",
    "seq-inflation": "the drafter's context advances by the drafted, not the accepted, count",
    "stale-kv": "the target KV cache is not cropped after a rejection",
    "skip-bonus": "the bonus token becomes the next anchor but is never emitted",
    "drop-mask-id": "output tokens equal to mask_token_id are dropped",
    "missed-stop": "a stop token among the accepted drafts is ignored (only the bonus is checked)",
    "hidden-offset": "context features are read one layer early (the residual entering the layer)",
}

# Planted sampler bugs, for testing the exactness check itself (never on by default):
#   reuse-draft-uniforms  the accept test reuses the drafter's random numbers (a published bug)
#   reuse-accept-uniform  the residual is sampled with the uniform that decided the rejection
#   resample-from-p       after a rejection, resample from p instead of normalised max(0, p - q)
SAMPLING_FAULTS = ("reuse-draft-uniforms", "reuse-accept-uniform", "resample-from-p")
