"""The gate's checks, in the order they run (`CHECKS`): each reads `GateInputs` and returns its
`Outcome` and, when it passed, its `Evidence` (its section of the approval record, and what later
checks read). A check the policy does not configure is skipped with the reason, and has no
section. Operational problems (a missing file, a malformed policy) raise `InputError`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard.gate.evidence import (
    AdvisoryEvidence,
    DifftestEvidence,
    EndpointEvidence,
    Evidence,
    LockEvidence,
    ModelSignatureEvidence,
    PolicyEvidence,
    ReferenceEvidence,
    RolloutEvidence,
    ScanEvidence,
    SignatureEvidence,
    VerifiedFiles,
)
from dflash_guard.gate.inputs import GateInputs
from dflash_guard.near_tie import judge_near_tie
from dflash_guard.outcome import Outcome
from dflash_guard.patterns import COMMIT_RE
from dflash_guard.pins.engine_pins import pinned_engines
from dflash_guard.pins.lockfile import Lockfile, lockfile_from_bytes
from dflash_guard.progress import stage
from dflash_guard.trust.evidence import Tolerance, provenance_note, signed_by_policy
from dflash_guard.trust.judge import MAX_LISTED
from dflash_guard.trust.signing import verify_lockfile_signature, verify_model_signatures

if TYPE_CHECKING:  # kernels_ref.threads imports torch; the gate loads it only to diff-test
    from kernels_ref.threads import ThreadChoice

Checked = tuple[Outcome, Evidence | None]


def _refused(problems: list[str], suffix: str = "") -> Checked:
    more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
    return Outcome.refused("; ".join(problems[:MAX_LISTED]) + more + suffix), None


def check_lockfile(inputs: GateInputs) -> Checked:
    """Schema (by parsing the bytes read once) and pins: target and drafter present, revisions
    full SHAs."""
    lock = lockfile_from_bytes(inputs.lock_read.data, str(inputs.lock_read.path))
    missing = [role for role in ("target", "drafter") if lock.artifact(role) is None]
    if missing:
        return Outcome.refused(f"the lockfile locks no {' and no '.join(missing)}: the gate "
                               "needs the pair"), None
    problems = []
    if inputs.policy.require_full_sha:
        for artifact in lock.artifacts:
            if artifact.source == "hub" and not COMMIT_RE.match(artifact.revision or ""):
                problems.append(f"{artifact.role} {artifact.repo}: revision "
                                f"{artifact.revision or '(default branch)'!r} is not a full SHA")
            for ref in artifact.code_refs:
                if not COMMIT_RE.match(ref.commit or ""):
                    problems.append(f"{artifact.role} code {ref.repo}: commit "
                                    f"{ref.commit or '(none recorded)'!r} is not a full SHA")
    if problems:
        return _refused(problems, " (policy: artifacts.require_full_sha)")
    engines = len(pinned_engines(lock))
    return Outcome.passed(f"{len(lock.artifacts)} artifacts and {engines} engine(s) "
                          f"pinned, {lock.digest()[:19]}"), LockEvidence(lock)


def check_lockfile_signature(inputs: GateInputs) -> Checked:
    """The lockfile's signatures against the policy's signers; whether its claims count."""
    policy = inputs.policy
    if policy.unsatisfiable:
        return Outcome.refused(
            f"policy {policy.name}: {policy.unsatisfiable[0]}; name your signers "
            f"in a policy that extends it (extends: {policy.name})"), None
    checks = verify_lockfile_signature(  # the bytes read, and the signatures read with them
        inputs.lock_read.copy, policy.lockfile_signers,
        required=policy.lockfile_signature_required, trust_root=inputs.options.trust_root,
        bundle_file=inputs.options.lock_bundle,
    )
    failed = [c for c in checks if not c.ok]
    if failed:
        return _refused([f"{Path(c.signature).name}: {c.reason}" for c in failed])
    trusted = signed_by_policy(checks)
    evidence = SignatureEvidence(tuple(c.signer for c in checks if c.verified and c.signer),
                                 trusted)
    note = provenance_note(inputs.lock, trusted)
    if not checks:
        return Outcome.passed(f"not signed (the policy does not require it){note}"), evidence
    said = [f"signed by {c.signer}" if c.verified else f"{Path(c.signature).name}: {c.reason}"
            for c in checks]
    return Outcome.passed("; ".join(said) + note), evidence


def check_verify(inputs: GateInputs) -> Checked:
    """Every locked file byte for byte, then what the engines would open from the verified
    folders (`pins.fileset`): a file the lock does not cover, or weights other than those the
    diff test decodes, refuses."""
    from dflash_guard.pins.fileset import approval_problems
    from dflash_guard.pins.verify import verify_lock

    # No stat cache: a cache can only save time, never decide an approval, so the gate hashes
    # every byte, and the record carries the digests computed here.
    report = verify_lock(inputs.lock, dict(inputs.options.roots),
                         download=inputs.options.download, use_cache=False,
                         progress=inputs.progress)
    if not report.passed:
        return _refused([p.describe() for p in report.problems])
    problems = []
    for artifact in inputs.lock.deployed:
        folder = report.locations.get(artifact.role)
        if folder is not None and Path(folder).is_dir():
            problems += approval_problems(artifact.role, Path(folder),
                                          {f.path for f in artifact.files})
    if problems:
        return _refused(problems)
    return (Outcome.passed(f"{report.files_checked} files match byte for byte; the engines "
                           "load only locked files, the diff test's weights"),
            VerifiedFiles(dict(report.locations), dict(report.digests)))


def check_scan(inputs: GateInputs) -> Checked:
    from dflash_guard.pins.loaded import deploy_engines
    from dflash_guard.scan import scan_paths

    locations = inputs.get(VerifiedFiles).locations
    judge, problems = inputs.judge(), []
    roles, findings, failing, remote_code, pickle_files, aside = {}, 0, 0, 0, 0, 0
    for artifact in inputs.lock.deployed:
        folder = locations.get(artifact.role)
        if folder is None:
            continue
        is_drafter = artifact.role == "drafter"
        upstream = judge.upstream(artifact.role, inputs.lock)[0]  # check_policy says why not
        report = scan_paths(
            [folder],
            target=locations.get("target") if is_drafter else None,
            reviewed_sha256=inputs.policy.reviewed_sha256,
            reviewed_templates=inputs.policy.reviewed_template_sha256,
            reviewed_files=inputs.policy.reviewed_file_sha256,
            param_budget=inputs.policy.drafter_max_params if is_drafter else None,
            engines=deploy_engines(inputs.lock),
            finite_weights=artifact.role == "target" and inputs.policy.target_finite,
            upstream_folder=locations.get(upstream.role) if upstream is not None else None,
            progress=inputs.progress,
        )
        failed, found = judge.scan(artifact, report)
        problems += found
        roles[artifact.role] = report.record_section(judge.fail_on)
        findings += len(report.findings)
        failing += len(failed)
        remote_code += len(report.remote_code)
        pickle_files += len(report.pickle_files)
        aside += len(report.not_loaded)
    if problems:
        return _refused(problems)
    fail_on = judge.fail_on.name
    return (Outcome.passed(f"{findings} findings, none at or above {fail_on}; "
                           f"{remote_code} remote-code files, {pickle_files} pickle files"
                           + (f"; {aside} files no engine of the deploy loads" if aside else "")),
            ScanEvidence(fail_on, findings, failing, remote_code, pickle_files, roles,
                         tuple(judge.used)))


def gguf_tolerances(lock: Lockfile, locations: Mapping[str, Path]) -> dict[str, Tolerance]:
    """The logprob tolerance measured for each locked `.gguf`'s precision (the gguf artifact's,
    and the target's that llama.cpp serves), by sha256, read from the verified folders (None
    where none was measured), for judging comparison records."""
    from dflash_guard.lossless.gguf_precision import gguf_precision
    from dflash_guard.lossless.logprob_check import TOLERANCES

    found: dict[str, Tolerance] = {}
    for role in ("gguf", "target"):
        artifact, folder = lock.artifact(role), locations.get(role)
        if artifact is None or folder is None:
            continue
        for file in (f for f in artifact.files if f.path.endswith(".gguf")):
            precision = gguf_precision(folder / file.path) or "float32"  # no matrices: tightest
            found[file.sha256] = ((TOLERANCES[precision], f"the one measured for {precision}")
                                  if precision in TOLERANCES else
                                  (None, f"no tolerance was measured for {precision} and the "
                                         "policy sets no difftest.max_logprob_delta"))
    return found


def check_policy(inputs: GateInputs) -> Checked:
    judge = inputs.judge()
    lock = inputs.lock
    locations = inputs.get(VerifiedFiles).locations
    tolerances = (gguf_tolerances(lock, locations)
                  if inputs.policy.gguf_requires_comparison else {})
    problems = judge.lock(lock, locations, inputs.options.engine_repos,
                          inputs.options.trust_root, tolerances)
    if problems:
        return _refused(problems)
    tiers = {artifact.role: str(judge.tier(artifact)) for artifact in lock.deployed}
    named = ", ".join(f"{role}: {tier}" for role, tier in sorted(tiers.items()))
    waivers = tuple(dict.fromkeys((*inputs.waivers_used, *judge.used)))
    listed = f"; waivers used: {', '.join(waivers)}" if waivers else ""
    return Outcome.passed(f"tiers {named}{listed}"), PolicyEvidence(tiers, tuple(judge.used))


def check_advisories(inputs: GateInputs) -> Checked:
    """Audit the lock against the policy's OSV feeds: a refused feed (bad or missing signature,
    stale) or an advisory at or above `fail_on` (affecting, or undecided) refuses."""
    from dflash_guard.audit.run import run_policy_audit

    rules = inputs.policy.advisories
    if rules is None:
        return Outcome.skipped("not configured (the policy has no advisories section)"), None
    report = run_policy_audit(inputs.lock_read.copy, rules,  # the bytes the gate judges
                              clones=inputs.options.engine_repos,
                              trust_root=inputs.options.trust_root,
                              engines=inputs.policy.engine_rules)
    problems = list(report.feed_problems) + [f"{f.advisory} ({f.severity.name}): {f.subject}: "
                                             f"{f.message}" for f in report.failing]
    if problems:
        return _refused(problems)
    below = len(report.findings)
    return (Outcome.passed(f"{len(report.feeds)} feed(s), {report.advisories} advisories; none at "
                           f"or above {rules.fail_on.name}"
                           + (f" ({below} below it)" if below else "")),
            AdvisoryEvidence(report.record_section()))


def check_model_signatures(inputs: GateInputs) -> Checked:
    checks = verify_model_signatures(inputs.lock, inputs.get(VerifiedFiles).locations,
                                     inputs.policy, trust_root=inputs.options.trust_root,
                                     provenance_trusted=inputs.judge().provenance_trusted)
    failed = [f"{c.subject}/model.sig: {c.reason}" for c in checks if not c.ok]
    if failed:
        return _refused(failed)
    signed = tuple(f"{c.subject} by {c.signer}" for c in checks)
    return (Outcome.passed("; ".join(signed) if signed else "none present, none required"),
            ModelSignatureEvidence(signed))


def check_difftest(inputs: GateInputs) -> Checked:
    with stage(inputs.progress, "importing torch"):  # seconds: say so
        from dflash_guard.lossless.local import run_difftest
    from dflash_guard.lossless.options import LocalOptions

    rules, options = inputs.policy.difftest, inputs.options
    locations = inputs.get(VerifiedFiles).locations
    report = run_difftest(LocalOptions(
        locations["target"], locations["drafter"],
        prompts=Path(rules.prompts) if rules.prompts else None,
        max_new_tokens=rules.max_new_tokens, device=options.device,
        inject=options.inject, threads=options.threads,
    ), inputs.progress)
    if not report.results or not math.isfinite(report.tau):
        return Outcome.refused(f"cannot tell: {len(report.results)} prompts compared, tau "
                               f"{report.tau} (a diff with nothing compared proves nothing)"
                               ), None
    near_ties = [d for d in report.divergences if d.divergence is not None
                 and judge_near_tie(d.divergence.margin, rules.near_tie_allowance)[0]]
    real = [d for d in report.divergences if d not in near_ties]
    if real:
        first = real[0].divergence
        assert first is not None  # `divergences` holds only results that diverged
        return Outcome.refused(
            f"{len(real)} of {len(report.results)} prompts diverge from the target's greedy "
            f"output (first: {real[0].prompt_id} at token {first.position}, "
            f"margin {first.margin})"), None
    if report.tau < rules.min_tau:
        return Outcome.refused(f"mean acceptance length {report.tau:.2f} is below the policy's "
                               f"minimum {rules.min_tau}"), None
    ties = f", {len(near_ties)} near-tie divergences tolerated" if near_ties else ""
    return (Outcome.passed(f"{len(report.results)} prompts identical{ties}; "
                           f"tau {report.tau:.2f} >= {rules.min_tau}; "
                           f"threads {_threads(report.threads)}"),
            DifftestEvidence(report.record_section(), round(report.tau, 4),
                             rules.max_new_tokens, rules.min_tau,
                             tuple(d.prompt_id for d in near_ties)))


def _threads(choice: ThreadChoice | None) -> str:
    return "?" if choice is None else f"{choice.threads} ({choice.reason})"


def check_endpoint_diff(inputs: GateInputs) -> Checked:
    """Diff the live baseline and candidate engines: a hard divergence always refuses, more
    near-ties than `max_near_ties` refuse, and so does an endpoint the gate cannot use."""
    from dflash_guard.lossless.endpoint import EndpointError, EndpointOptions, run_endpoint_diff
    from dflash_guard.lossless.endpoint.metrics import metrics_cannot_tell
    from dflash_guard.lossless.prompts import read_prompts
    from kernels_ref.prompts import DEFAULT_PROMPTS

    rules = inputs.endpoints
    if rules is None:
        return Outcome.skipped("not configured (the policy has no difftest.endpoints)"), None
    assert inputs.engines is not None
    try:
        report = run_endpoint_diff(
            EndpointOptions(
                *inputs.engines, max_new_tokens=rules.max_new_tokens,
                concurrency=rules.concurrency, near_tie_margin=rules.near_tie_margin,
            ),
            read_prompts(Path(rules.prompts) if rules.prompts else DEFAULT_PROMPTS),
            inputs.progress,
        )
    except EndpointError as error:
        return Outcome.refused(f"{error} (a gate that cannot check does not approve)"), None
    hard, ties = report.hard_divergences, report.near_ties
    total = len(report.results)
    if total == 0:
        return Outcome.refused("cannot tell: no prompt was compared on the live endpoints"), None
    if rules.metrics and (blind := metrics_cannot_tell(report.acceptance)) is not None:
        return Outcome.refused(f"cannot tell: {blind} (difftest.endpoints.metrics asks for "
                               "acceptance figures)"), None
    if hard:
        first = hard[0].divergence
        assert first is not None  # a hard result has diverged
        return Outcome.refused(
            f"{len(hard)} of {total} prompts diverge between baseline and candidate "
            f"(first: {hard[0].prompt_id} at token {first.position}"
            f"{': ' + first.detail if first.detail else ''})"), None
    if len(ties) > rules.max_near_ties:
        names = ", ".join(r.prompt_id for r in ties)
        return Outcome.refused(f"{len(ties)} near-tie divergences ({names}), more than the "
                               f"policy's max_near_ties {rules.max_near_ties}"), None
    acceptance = report.acceptance
    tau = acceptance.mean_acceptance_length if acceptance else None
    figures = f"; candidate tau {tau:.2f}" if tau is not None else ""
    ties_note = f", {len(ties)} near-ties tolerated" if ties else ""
    return (Outcome.passed(f"{total} prompts match on the live endpoints{ties_note}{figures}"),
            EndpointEvidence(report.record_section(), rules.model, rules.max_new_tokens,
                             rules.max_near_ties, rules.near_tie_margin))


def check_reference_diff(inputs: GateInputs) -> Checked:
    """The candidate engine against kernels_ref on the locked target, logprobs included: the
    one check that the model behind the endpoint is the locked one (greedy tokens can agree
    while the weights differ). A hard divergence, or logprobs past the tolerance, refuses."""
    from dflash_guard.lossless.endpoint import EndpointError
    from dflash_guard.lossless.options import ReferenceOptions
    from dflash_guard.lossless.reference_diff import run_reference_diff

    rules = inputs.endpoints
    if rules is None:
        return Outcome.skipped("not configured (the policy has no difftest.endpoints)"), None
    assert inputs.engines is not None
    tolerance = inputs.policy.difftest.max_logprob_delta
    locations, candidate = inputs.get(VerifiedFiles).locations, inputs.engines[1]
    # the drafter is judged by the candidate's acceptance counters: only with its metrics
    drafter = locations["drafter"] if candidate.metrics_url else None
    try:
        report = run_reference_diff(ReferenceOptions(
            locations["target"], candidate, drafter=drafter,
            prompts=Path(rules.prompts) if rules.prompts else None,
            max_new_tokens=rules.max_new_tokens, concurrency=rules.concurrency,
            near_tie_margin=rules.near_tie_margin, threads=inputs.options.threads,
            max_logprob_delta=tolerance,
            max_logprob_delta_from="policy difftest.max_logprob_delta"), inputs.progress)
    except EndpointError as error:
        return Outcome.refused(f"{error} (a gate that cannot check does not approve)"), None
    undrafted = "; drafter not checked (the policy sets difftest.endpoints.metrics: false)"
    return (report.outcome("the candidate", undrafted),
            ReferenceEvidence(report.summary()) if report.passed else None)


def check_rollout(inputs: GateInputs) -> Checked:
    """Bench the endpoint diff's engines at the policy's expected concurrency: speculation
    slower than `min_speedup` times the baseline refuses, with the numbers."""
    from dflash_guard.lossless.endpoint import EndpointError
    from dflash_guard.lossless.prompts import read_prompts
    from dflash_guard.rollout.bench import BenchOptions, run_bench
    from kernels_ref.prompts import DEFAULT_PROMPTS

    rules, endpoints = inputs.policy.rollout, inputs.endpoints
    if rules is None:
        return Outcome.skipped("not configured (the policy has no rollout section)"), None
    if endpoints is None:
        return Outcome.refused("the rollout section needs two engines to bench: "
                               "difftest.endpoints, or --baseline and --candidate"), None
    tier = rules.expected_concurrency
    assert inputs.engines is not None
    try:
        report = run_bench(BenchOptions(
            *inputs.engines,
            tuple(read_prompts(Path(endpoints.prompts) if endpoints.prompts else DEFAULT_PROMPTS)),
            tiers=(tier,), requests=rules.requests, max_tokens=endpoints.max_new_tokens,
        ), inputs.progress)
    except EndpointError as error:
        return Outcome.refused(f"{error} (a gate that cannot check does not approve)"), None
    result = report.tiers[0]
    if not (math.isfinite(result.speedup) and result.speedup > 0):
        return Outcome.refused(f"cannot tell: speedup {result.speedup} at concurrency {tier} "
                               "(no tokens measured)"), None
    figures = (f"speedup {result.speedup:.2f}x at concurrency {tier} (baseline "
               f"{result.baseline.tokens_per_s:.1f} tok/s, candidate "
               f"{result.candidate.tokens_per_s:.1f} tok/s)")
    if result.speedup < rules.min_speedup:
        return Outcome.refused(f"{figures} is below the policy's min_speedup "
                               f"{rules.min_speedup:g}: speculation does not pay at the expected "
                               "load"), None
    measured = report.to_json()["tiers"][0]
    return (Outcome.passed(f"{figures} >= {rules.min_speedup:g}"),
            RolloutEvidence(tier, rules.min_speedup, measured))


@dataclasses.dataclass(frozen=True)
class GateCheck:
    """One named step of the gate."""

    name: str
    run: Callable[[GateInputs], Checked]


CHECKS = (
    GateCheck("lockfile", check_lockfile),
    GateCheck("lockfile signature", check_lockfile_signature),
    GateCheck("verify", check_verify),
    GateCheck("scan", check_scan),
    GateCheck("policy", check_policy),
    GateCheck("advisories", check_advisories),
    GateCheck("model signatures", check_model_signatures),
    GateCheck("difftest", check_difftest),
    GateCheck("endpoint diff", check_endpoint_diff),
    GateCheck("rollout", check_rollout),
    # last, so nothing it leaves behind on an engine (its logprob requests) can change what the
    # benchmark measures
    GateCheck("reference diff", check_reference_diff),
)
STEPS = tuple(check.name for check in CHECKS)
