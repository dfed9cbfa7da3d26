"""The deploy gate: the ordered checks a pre-deploy pipeline runs, failing fast with the reason.

In order (`checks.CHECKS`): the lockfile (schema, pins), its signature, byte-exact verification
of every locked folder, the scan of exactly the verified folders (then the tier rules on remote
code and pickle formats), the policy (expired waivers, staging, GGUF comparisons, engine builds),
the advisory audit against the policy's OSV feeds, model signatures, the greedy lossless diff test
of the locked pair, and, when configured, the diff of the live baseline and candidate engines and
the rollout benchmark; an endpoint the gate cannot reach refuses (a gate that cannot check does
not approve). The first failing check refuses the deploy; only an approval writes the record
(`record`, an in-toto statement whose sections are the checks' `evidence`).

- `inputs`: what a run is told (`GateOptions`) and what each check reads (`GateInputs`);
- `checks`: the checks in run order, each returning `(Outcome, Evidence | None)`;
- `evidence`: one frozen section per check;
- `endpoints`: the live engines to diff, from the policy and the command line;
- `record`: the approval statement; `run`: prechecks, the loop, the result.
"""

from dflash_guard.gate.checks import CHECKS, STEPS
from dflash_guard.gate.endpoints import resolve_api_key, resolve_endpoints
from dflash_guard.gate.inputs import ApprovalSigning, EndpointOverrides, GateOptions
from dflash_guard.gate.run import GateResult, run_gate

__all__ = ["CHECKS", "STEPS", "ApprovalSigning", "EndpointOverrides", "GateOptions",
           "GateResult", "resolve_api_key", "resolve_endpoints", "run_gate"]
