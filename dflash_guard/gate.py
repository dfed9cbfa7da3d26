"""The deploy gate: the ordered checks a pre-deploy pipeline runs, failing fast with the reason.

In order: the lockfile (schema, pins), its signature, byte-exact verification of every locked
folder, the scan of exactly the verified folders (then the tier rules on remote code and pickle
formats), the policy (expired waivers, staging, GGUF comparisons: hand-written, or records of
`difftest reference` checked against the lock; engine builds), the advisory audit of the lock
against the policy's OSV feeds (when it names any), model signatures, the greedy lossless diff
test of the locked pair, and, when the policy names endpoints (`difftest.endpoints`), the diff of
the live baseline and candidate engines; an endpoint the gate cannot reach refuses (a gate that
cannot check does not approve). The first failing check refuses the deploy; only an approval
writes the approval record (an in-toto statement, see `provenance`). Operational problems (a
missing file, a malformed policy) raise `InputError`.

Each check is a function `(GateInputs) -> (Outcome, Learned)`: it reads the frozen inputs and
hands what later checks (and the approval record) need on as a small frozen `Learned` value;
`STEPS` is the list of the checks' names. `run_gate(GateOptions(...))` is the entry point. What
the policy makes of a finding (tiers, waivers, reviewed code) is `trust.judge`'s; each report
writes its own section of the approval record (`record_section`).

The module is over 450 lines on purpose: the ten checks read in the order they run, next to the
loop that runs them; split apart, the order a deploy is checked in would be scattered.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflash_guard.errors import InputError
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.outcome import Outcome
from dflash_guard.outputs import refuse_outputs_over_inputs
from dflash_guard.patterns import COMMIT_RE
from dflash_guard.pins.lockfile import Lockfile, load_lockfile
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from dflash_guard.trust.evidence import provenance_note, signed_by_policy
from dflash_guard.trust.judge import MAX_LISTED, Judge
from dflash_guard.trust.policy import EndpointRules, Policy, load_policy
from dflash_guard.trust.provenance import (
    CheckResult,
    approval_statement,
    sign_approval,
    write_approval,
)
from dflash_guard.trust.signing import (
    KEY_SIG_SUFFIX,
    SIGSTORE_SUFFIX,
    identity_token,
    lock_signature_paths,
    verify_lockfile_signature,
    verify_model_signatures,
)
from dflash_guard.urls import http_endpoint, metrics_url
from kernels_ref.faults import Fault  # torch-free

if TYPE_CHECKING:  # kernels_ref.threads imports torch; the gate loads it only to diff-test
    from kernels_ref.threads import ThreadChoice



@dataclasses.dataclass(frozen=True)
class ApprovalSigning:
    """How the approval record is signed: Sigstore (keyless), an ECDSA key (PEM), or not."""

    sigstore: bool = False
    key: Path | None = None
    interactive: bool = False  # the Sigstore login may open a browser

    @property
    def wanted(self) -> bool:
        return self.sigstore or self.key is not None


@dataclasses.dataclass(frozen=True)
class EndpointOverrides:
    """Endpoint URLs given at gate time: they override the policy's (both: run the endpoint
    diff under a policy that names none)."""

    baseline: str | None = None
    candidate: str | None = None
    api_key_env: str | None = None  # the operator's `--api-key-env`: the only key ever sent


@dataclasses.dataclass(frozen=True)
class GateOptions:
    """Everything a gate run is told: what to gate, under which policy, and what to write."""

    lock_path: Path
    policy: str | Path | None = None  # a file or a built-in name; None: the built-in default
    roots: Mapping[str, Path] = dataclasses.field(default_factory=dict)  # role -> folder
    out: Path | None = None  # the approval record, written only on approval
    signing: ApprovalSigning = ApprovalSigning()
    trust_root: Path | None = None  # Sigstore trusted root: verify offline
    download: bool = False  # fetch artifacts missing from the HF cache at the pinned commit
    device: str = "cpu"
    inject: Fault | None = None  # a planted difftest fault (demonstrations)
    threads: int | None = None  # difftest torch CPU threads; None: kernels_ref's thread policy
    endpoints: EndpointOverrides = EndpointOverrides()
    engine_repos: Mapping[str, Path] = dataclasses.field(default_factory=dict)  # advisory audit:
    # a locked engine (or Hub repo) -> a local git clone, so GIT ranges are decided over it
    today: dt.date | None = None  # None: today (UTC); waivers expire against it


@dataclasses.dataclass(frozen=True)
class GateResult:
    """The decision, every check that ran (in order), and the approval record if approved."""

    approved: bool
    checks: tuple[CheckResult, ...]
    reason: str | None = None
    record: Path | None = None
    signature: Path | None = None
    statement: Mapping[str, Any] | None = None

    @property
    def passed(self) -> bool:
        """Approved (exit 0); refused is exit 1."""
        return self.approved

    @property
    def not_run(self) -> list[str]:
        """The checks a refusal stopped before (in order)."""
        return [s for s in STEPS if s not in {c.name for c in self.checks}]

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reason": self.reason,
            "checks": [c.to_json() for c in self.checks],
            "not_run": self.not_run,
            "record": str(self.record) if self.record else None,
            "signature": str(self.signature) if self.signature else None,
        }


@dataclasses.dataclass(frozen=True)
class Learned:
    """What one check hands on: to later checks (`lock`, `locations`) and to the approval
    record (`tiers`, `waivers` used, `record` sections named as `approval_statement`'s keywords)."""

    lock: Lockfile | None = None
    locations: Mapping[str, Path] | None = None
    tiers: Mapping[str, str] | None = None
    waivers: tuple[str, ...] = ()
    record: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    provenance_trusted: bool | None = None  # the lockfile signature check's finding


NOTHING = Learned()


@dataclasses.dataclass(frozen=True)
class GateInputs:
    """What every check reads: the run's settings and what the checks before it learned."""

    lock_path: Path
    policy: Policy
    roots: Mapping[str, Path]
    today: dt.date
    trust_root: Path | None
    download: bool
    device: str
    inject: Fault | None
    endpoints: EndpointRules | None
    engines: tuple[EngineEndpoint, EngineEndpoint] | None = None  # the endpoints' engines
    lock: Lockfile | None = None
    locations: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    tiers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    waivers_used: tuple[str, ...] = ()
    record: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    engine_repos: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    provenance_trusted: bool = False  # the lock's hub-confirmed claims count (signed lock)
    threads: int | None = None
    progress: Progress = dataclasses.field(default=NO_PROGRESS, compare=False, repr=False)

    def learn(self, learned: Learned) -> GateInputs:
        """These inputs with what a check learned added."""
        return dataclasses.replace(
            self,
            lock=learned.lock or self.lock,
            locations=learned.locations if learned.locations is not None else self.locations,
            tiers=learned.tiers if learned.tiers is not None else self.tiers,
            waivers_used=self.waivers_used + tuple(
                w for w in dict.fromkeys(learned.waivers) if w not in self.waivers_used),
            record={**self.record, **learned.record},
            provenance_trusted=(learned.provenance_trusted
                                if learned.provenance_trusted is not None
                                else self.provenance_trusted),
        )

    def judge(self) -> Judge:
        """The policy's judge for one check (it collects the waivers that check uses)."""
        return Judge(self.policy, self.today, self.provenance_trusted)


Checked = tuple[Outcome, Learned]


def _listed(problems: list[str]) -> str:
    more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
    return "; ".join(problems[:MAX_LISTED]) + more


# --- the checks ------------------------------------------------------------------------------


def check_lockfile(inputs: GateInputs) -> Checked:
    """Schema (by loading it) and pins: target and drafter present, revisions full SHAs."""
    lock = load_lockfile(inputs.lock_path)
    missing = [role for role in ("target", "drafter") if lock.artifact(role) is None]
    if missing:
        return Outcome.refused(f"the lockfile locks no {' and no '.join(missing)}: the gate "
                               "needs the pair"), NOTHING
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
        return Outcome.refused(_listed(problems) + " (policy: artifacts.require_full_sha)"), NOTHING
    return Outcome.passed(f"{len(lock.artifacts)} artifacts and {len(lock.engines)} engine(s) "
                          f"pinned, {lock.digest()[:19]}"), Learned(lock=lock)


def check_lockfile_signature(inputs: GateInputs) -> Checked:
    """The lockfile's signatures against the policy's signers; whether its claims count."""
    if inputs.policy.unsatisfiable:
        return Outcome.refused(
            f"policy {inputs.policy.name}: {inputs.policy.unsatisfiable[0]}; name your signers "
            f"in a policy that extends it (extends: {inputs.policy.name})"), NOTHING
    checks = verify_lockfile_signature(
        inputs.lock_path, inputs.policy.lockfile_signers,
        required=inputs.policy.lockfile_signature_required, trust_root=inputs.trust_root,
    )
    failed = [c for c in checks if not c.ok]
    if failed:
        return Outcome.refused(
            _listed([f"{Path(c.signature).name}: {c.reason}" for c in failed])), NOTHING
    trusted = signed_by_policy(checks)
    assert inputs.lock is not None
    note = provenance_note(inputs.lock, trusted)
    learned = Learned(provenance_trusted=trusted)
    if not checks:
        return Outcome.passed(f"not signed (the policy does not require it){note}"), learned
    return Outcome.passed("; ".join(f"signed by {c.signer}" for c in checks)), learned


def check_verify(inputs: GateInputs) -> Checked:
    from dflash_guard.pins.verify import verify_lock

    assert inputs.lock is not None
    # No stat cache: a cache can only save time, never decide an approval, so the gate hashes
    # every byte, and the record carries the digests computed here.
    report = verify_lock(inputs.lock, dict(inputs.roots), download=inputs.download,
                         use_cache=False, progress=inputs.progress)
    if not report.passed:
        return Outcome.refused(_listed(
            [f"{p.role}/{p.path}: {_problem(p.kind)}" for p in report.problems])), NOTHING
    return (Outcome.passed(f"{report.files_checked} files match byte for byte"),
            Learned(locations=dict(report.locations), record={"digests": dict(report.digests)}))


def _problem(kind: str) -> str:
    if kind in ("size", "sha256"):
        return f"{kind} differs from the lock"
    return {"missing": "missing", "extra": "not in the lock", "symlink": "unsafe symlink",
            "path": "unsafe path"}.get(kind, kind)


def check_scan(inputs: GateInputs) -> Checked:
    from dflash_guard.scan import scan_paths

    assert inputs.lock is not None
    judge, problems = inputs.judge(), []
    fail_on = judge.fail_on
    totals = {"findings": 0, "failing": 0, "remote_code": 0, "pickle_files": 0}
    per_role: dict[str, object] = {}
    for artifact in inputs.lock.artifacts:
        folder = inputs.locations.get(artifact.role)
        if folder is None:
            continue
        is_drafter = artifact.role == "drafter"
        report = scan_paths(
            [folder],
            target=inputs.locations.get("target") if is_drafter else None,
            reviewed_sha256=inputs.policy.reviewed_sha256,
            param_budget=inputs.policy.drafter_max_params if is_drafter else None,
            progress=inputs.progress,
        )
        failing, found = judge.scan(artifact, report)
        problems += found
        per_role[artifact.role] = report.record_section(fail_on)
        totals["findings"] += len(report.findings)
        totals["failing"] += len(failing)
        totals["remote_code"] += len(report.remote_code)
        totals["pickle_files"] += len(report.pickle_files)
    if problems:
        return Outcome.refused(_listed(problems)), NOTHING
    summary = {"fail_on": fail_on.name, **totals, "roles": per_role}
    return (Outcome.passed(f"{totals['findings']} findings, none at or above {fail_on.name}; "
                           f"{totals['remote_code']} remote-code files, "
                           f"{totals['pickle_files']} pickle files"),
            Learned(waivers=tuple(judge.used), record={"scan_summary": summary}))


def check_policy(inputs: GateInputs) -> Checked:
    assert inputs.lock is not None
    judge = inputs.judge()
    problems = judge.lock(inputs.lock, inputs.locations, inputs.engine_repos, inputs.trust_root)
    if problems:
        return Outcome.refused(_listed(problems)), NOTHING
    tiers = {artifact.role: judge.tier(artifact) for artifact in inputs.lock.artifacts}
    named = ", ".join(f"{role}: {tier}" for role, tier in sorted(tiers.items()))
    waivers = tuple(dict.fromkeys((*inputs.waivers_used, *judge.used)))
    listed = f"; waivers used: {', '.join(waivers)}" if waivers else ""
    return Outcome.passed(f"tiers {named}{listed}"), Learned(tiers=tiers,
                                                              waivers=tuple(judge.used))


def check_advisories(inputs: GateInputs) -> Checked:
    """Audit the lock against the policy's OSV feeds: a refused feed (bad or missing signature,
    stale) or an advisory at or above `fail_on` (affecting, or undecided) refuses."""
    from dflash_guard.audit.run import run_policy_audit

    rules = inputs.policy.advisories
    if rules is None:
        return Outcome.skipped("not configured (the policy has no advisories section)"), NOTHING
    report = run_policy_audit(inputs.lock_path, rules, clones=inputs.engine_repos,
                              trust_root=inputs.trust_root)
    problems = list(report.feed_problems) + [f"{f.advisory} ({f.severity.name}): {f.subject}: "
                                             f"{f.message}" for f in report.failing]
    if problems:
        return Outcome.refused(_listed(problems)), NOTHING
    below = len(report.findings)
    return (Outcome.passed(f"{len(report.feeds)} feed(s), {report.advisories} advisories; none at "
                           f"or above {rules.fail_on}" + (f" ({below} below it)" if below else "")),
            Learned(record={"advisories": report.record_section()}))


def check_model_signatures(inputs: GateInputs) -> Checked:
    assert inputs.lock is not None
    checks = verify_model_signatures(inputs.lock, inputs.locations, inputs.policy,
                                     trust_root=inputs.trust_root,
                                     provenance_trusted=inputs.provenance_trusted)
    failed = [f"{c.subject}/model.sig: {c.reason}" for c in checks if not c.ok]
    if failed:
        return Outcome.refused(_listed(failed)), NOTHING
    signed = [f"{c.subject} by {c.signer}" for c in checks]
    return Outcome.passed("; ".join(signed) if signed else "none present, none required"), NOTHING


def check_difftest(inputs: GateInputs) -> Checked:
    with stage(inputs.progress, "importing torch"):  # seconds: say so
        from dflash_guard.lossless.local import run_difftest
    from dflash_guard.lossless.options import LocalOptions

    rules = inputs.policy.difftest
    report = run_difftest(LocalOptions(
        inputs.locations["target"], inputs.locations["drafter"],
        prompts=Path(rules.prompts) if rules.prompts else None,
        max_new_tokens=rules.max_new_tokens, device=inputs.device,
        inject=inputs.inject, threads=inputs.threads,
    ), inputs.progress)
    if not report.results or not math.isfinite(report.tau):
        return Outcome.refused(f"cannot tell: {len(report.results)} prompts compared, tau "
                               f"{report.tau} (a diff with nothing compared proves nothing)"
                               ), NOTHING
    near_ties = [d for d in report.divergences
                 if d.divergence is not None and d.divergence.margin is not None
                 and d.divergence.margin < rules.near_tie_allowance]
    real = [d for d in report.divergences if d not in near_ties]
    if real:
        first = real[0].divergence
        assert first is not None  # `divergences` holds only results that diverged
        return Outcome.refused(
            f"{len(real)} of {len(report.results)} prompts diverge from the target's greedy "
            f"output (first: {real[0].prompt_id} at token {first.position}, "
            f"margin {first.margin})"), NOTHING
    if report.tau < rules.min_tau:
        return Outcome.refused(f"mean acceptance length {report.tau:.2f} is below the policy's "
                               f"minimum {rules.min_tau}"), NOTHING
    summary = {**report.record_section(), "max_new_tokens": rules.max_new_tokens,
               "near_ties": [d.prompt_id for d in near_ties], "min_tau": rules.min_tau}
    ties = f", {len(near_ties)} near-tie divergences tolerated" if near_ties else ""
    return (Outcome.passed(f"{len(report.results)} prompts identical{ties}; "
                           f"tau {report.tau:.2f} >= {rules.min_tau}; "
                           f"threads {_threads(report.threads)}"),
            Learned(record={"difftest": summary, "acceptance_length": round(report.tau, 4)}))


def _threads(choice: ThreadChoice | None) -> str:
    return "?" if choice is None else f"{choice.threads} ({choice.reason})"


def check_endpoint_diff(inputs: GateInputs) -> Checked:
    """Diff the live baseline and candidate engines: a hard divergence always refuses, more
    near-ties than `max_near_ties` refuse, and so does an endpoint the gate cannot use."""
    from dflash_guard.lossless.defaults import DEFAULT_PROMPTS
    from dflash_guard.lossless.endpoint import EndpointError, EndpointOptions, run_endpoint_diff
    from dflash_guard.lossless.prompts import read_prompts

    rules = inputs.endpoints
    if rules is None:
        return Outcome.skipped("not configured (the policy has no difftest.endpoints)"), NOTHING
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
        return Outcome.refused(f"{error} (a gate that cannot check does not approve)"), NOTHING
    hard, ties = report.hard_divergences, report.near_ties
    acceptance = report.acceptance
    total = len(report.results)
    if total == 0:
        return Outcome.refused("cannot tell: no prompt was compared on the live endpoints"
                               ), NOTHING
    if rules.metrics and any("cannot tell" in w for w in report.warnings):
        return Outcome.refused("cannot tell: the candidate's acceptance counters are not finite "
                               "numbers"), NOTHING
    if hard:
        first = hard[0].divergence
        assert first is not None  # a hard result has diverged
        return Outcome.refused(
            f"{len(hard)} of {total} prompts diverge between baseline and candidate "
            f"(first: {hard[0].prompt_id} at token {first.position}"
            f"{': ' + first.detail if first.detail else ''})"), NOTHING
    if len(ties) > rules.max_near_ties:
        names = ", ".join(r.prompt_id for r in ties)
        return Outcome.refused(f"{len(ties)} near-tie divergences ({names}), more than the "
                               f"policy's max_near_ties {rules.max_near_ties}"), NOTHING
    summary = {**report.record_section(), "model": rules.model,
               "max_new_tokens": rules.max_new_tokens, "max_near_ties": rules.max_near_ties,
               "near_tie_margin": rules.near_tie_margin}
    tau = acceptance.mean_acceptance_length if acceptance else None
    figures = f"; candidate tau {tau:.2f}" if tau is not None else ""
    ties_note = f", {len(ties)} near-ties tolerated" if ties else ""
    return (Outcome.passed(f"{total} prompts match on the live endpoints{ties_note}{figures}"),
            Learned(record={"endpoint_diff": summary}))


def check_rollout(inputs: GateInputs) -> Checked:
    """Bench the endpoint diff's engines at the policy's expected concurrency: speculation
    slower than `min_speedup` times the baseline refuses, with the numbers."""
    from dflash_guard.lossless.defaults import DEFAULT_PROMPTS
    from dflash_guard.lossless.endpoint import EndpointError
    from dflash_guard.lossless.prompts import read_prompts
    from dflash_guard.rollout.bench import BenchOptions, run_bench

    rules, endpoints = inputs.policy.rollout, inputs.endpoints
    if rules is None:
        return Outcome.skipped("not configured (the policy has no rollout section)"), NOTHING
    if endpoints is None:
        return Outcome.refused("the rollout section needs two engines to bench: "
                               "difftest.endpoints, or --baseline and --candidate"), NOTHING
    tier = rules.expected_concurrency
    assert inputs.engines is not None
    try:
        report = run_bench(BenchOptions(
            *inputs.engines,
            tuple(read_prompts(Path(endpoints.prompts) if endpoints.prompts else DEFAULT_PROMPTS)),
            tiers=(tier,), requests=rules.requests, max_tokens=endpoints.max_new_tokens,
        ), inputs.progress)
    except EndpointError as error:
        return Outcome.refused(f"{error} (a gate that cannot check does not approve)"), NOTHING
    result = report.tiers[0]
    if not (math.isfinite(result.speedup) and result.speedup > 0):
        return Outcome.refused(f"cannot tell: speedup {result.speedup} at concurrency {tier} "
                               "(no tokens measured)"), NOTHING
    figures = (f"speedup {result.speedup:.2f}x at concurrency {tier} (baseline "
               f"{result.baseline.tokens_per_s:.1f} tok/s, candidate "
               f"{result.candidate.tokens_per_s:.1f} tok/s)")
    if result.speedup < rules.min_speedup:
        return Outcome.refused(f"{figures} is below the policy's min_speedup "
                               f"{rules.min_speedup:g}: speculation does not pay at the expected "
                               "load"), NOTHING
    summary = {"expected_concurrency": tier, "min_speedup": rules.min_speedup,
               **report.to_json()["tiers"][0]}
    return (Outcome.passed(f"{figures} >= {rules.min_speedup:g}"),
            Learned(record={"rollout": summary}))


def engines_from_policy(rules: EndpointRules, api_key: str | None,
                        key_source: str | None) -> tuple[EngineEndpoint, EngineEndpoint]:
    """The baseline and candidate engines the endpoint rules name, built once for the endpoint
    diff and the rollout bench: the operator's API key (`resolve_api_key`), the candidate's
    metrics at its origin when `metrics` is on."""
    settings: dict[str, Any] = dict(model=rules.model, api_key=api_key, key_source=key_source,
                                    timeout=rules.timeout_s)
    return (EngineEndpoint(rules.baseline, **settings),
            EngineEndpoint(rules.candidate, **settings,
                           metrics_url=metrics_url(rules.candidate) if rules.metrics else None))


def resolve_api_key(policy: Policy, overrides: EndpointOverrides) -> str | None:
    """The API key the endpoint checks send, if any. Only a variable the operator names
    (`--api-key-env`) is read, and only for endpoints named on the command line: a policy file
    sits next to the URLs it names, so it can neither pick a variable nor a host for a key."""
    rules = policy.difftest.endpoints
    asked = rules.api_key_env if rules is not None else None
    name = overrides.api_key_env
    if asked is not None and asked != name:
        raise InputError(f"difftest.endpoints.api_key_env asks to send the variable {asked} as "
                         f"an API key; a key is sent only when the operator names it: pass "
                         f"--api-key-env {asked} with --baseline and --candidate")
    if name is None:
        return None
    if not (overrides.baseline and overrides.candidate):
        raise InputError("--api-key-env: the key goes only to hosts named on the command line; "
                         "pass --baseline and --candidate")
    key = os.environ.get(name, "").strip()
    if not key:
        raise InputError(f"--api-key-env names {name}, but that variable is unset or empty")
    return key


def resolve_endpoints(policy: Policy, baseline: str | None = None,
                      candidate: str | None = None) -> EndpointRules | None:
    """The endpoint diff to run: the policy's, with URLs overridden at gate time; the policy's
    settings with both URLs when it names none; None when neither configures one."""
    rules = policy.difftest.endpoints
    if rules is None and (baseline or candidate):
        if not (baseline and candidate):
            raise InputError("the policy names no endpoints: give both --baseline and "
                             "--candidate")
        rules = EndpointRules(baseline, candidate, max_new_tokens=policy.difftest.max_new_tokens)
    if rules is None:
        return None
    rules = dataclasses.replace(rules, baseline=baseline or rules.baseline,
                                candidate=candidate or rules.candidate)
    for flag, url in (("--baseline", rules.baseline), ("--candidate", rules.candidate)):
        http_endpoint(url, flag)
    return rules


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
)
STEPS = tuple(check.name for check in CHECKS)


# --- the gate --------------------------------------------------------------------------------


def _check_signing(options: GateOptions) -> None:
    signing = options.signing
    if signing.sigstore and signing.key is not None:
        raise InputError("--sign and --key are exclusive: sign with Sigstore or with a key")
    if signing.key is not None and not signing.key.is_file():
        raise InputError(f"--key {signing.key}: no such file")
    if signing.wanted and options.out is None:
        raise InputError("signing the approval needs --out FILE")


def _check_outputs(options: GateOptions, policy: Policy) -> None:
    """The approval record and its signature must not replace anything the gate reads."""
    if options.out is None:
        return
    out = Path(options.out)
    suffix = KEY_SIG_SUFFIX if options.signing.key is not None else SIGSTORE_SUFFIX
    outputs = [("--out", out)]
    if options.signing.wanted:
        outputs.append(("signature", out.with_name(out.name + suffix)))
    lock_path = Path(options.lock_path)
    inputs = [("--lock", lock_path), *policy.files(),
              ("--key", options.signing.key), ("--trust-root", options.trust_root),
              *((f"--engine-repo {name}", path) for name, path in options.engine_repos.items()),
              *(("lockfile signature", p) for p in lock_signature_paths(lock_path)),
              *((f"--root {role}", folder) for role, folder in options.roots.items())]
    refuse_outputs_over_inputs(outputs, inputs)


def run_gate(options: GateOptions, progress: Progress = NO_PROGRESS) -> GateResult:
    """Run every check in order; refuse at the first failure; write `options.out` only on
    approval (signed as `options.signing` says). The checks are stages of `progress`, each
    holding the stages of its own work (hashing, scanning, decoding, requests)."""
    _check_signing(options)
    policy = load_policy(options.policy)
    _check_outputs(options, policy)
    endpoints = resolve_endpoints(policy, options.endpoints.baseline,
                                  options.endpoints.candidate)
    api_key = resolve_api_key(policy, options.endpoints)
    # Ask for the Sigstore credential before any work, so a missing one fails at once.
    token = identity_token(options.signing.interactive) if options.signing.sigstore else None
    inputs = GateInputs(
        lock_path=Path(options.lock_path), policy=policy, roots=dict(options.roots),
        today=options.today or dt.datetime.now(dt.UTC).date(), trust_root=options.trust_root,
        download=options.download, device=options.device, inject=options.inject,
        endpoints=endpoints,
        engines=(engines_from_policy(endpoints, api_key, options.endpoints.api_key_env)
                 if endpoints is not None else None),
        engine_repos=dict(options.engine_repos),
        threads=options.threads,
        progress=progress,
    )
    results: list[CheckResult] = []
    with stage(progress, "gate", len(CHECKS), "checks"):
        for check in CHECKS:
            with stage(progress, check.name):
                outcome, learned = check.run(inputs)
            progress.advanced()
            results.append(CheckResult.of(check.name, outcome))
            if not outcome.ok:
                return GateResult(False, tuple(results),
                                  reason=f"{check.name}: {outcome.reason}")
            inputs = inputs.learn(learned)
    assert inputs.lock is not None
    statement = approval_statement(
        inputs.lock_path, inputs.lock, policy, checks=results, tiers=inputs.tiers,
        waivers_used=inputs.waivers_used, **inputs.record,
    )
    signature = None
    out = options.out
    if out is not None:
        write_approval(statement, out)
        if options.signing.wanted:
            signature = sign_approval(out, key=options.signing.key, token=token,
                                      interactive=options.signing.interactive)
    return GateResult(True, tuple(results), record=out, signature=signature, statement=statement)
