"""The deploy gate: the ordered checks a pre-deploy pipeline runs, failing fast with the reason.

In order: the lockfile (schema, pins), its signature, byte-exact verification of every locked
folder, the scan of exactly the verified folders (then the tier rules on remote code and pickle
formats), the policy (expired waivers, staging, GGUF comparisons, engine builds), model
signatures, the greedy lossless diff test of the locked pair, and, when the policy names
endpoints (`difftest.endpoints`), the diff of the live baseline and candidate engines; an
endpoint the gate cannot reach refuses (a gate that cannot check does not approve). The first
failing check
refuses the deploy; only an approval writes the approval record (an in-toto statement, see
`provenance`). Operational problems (a missing file, a malformed policy) raise `InputError`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dflash_guard.errors import InputError
from dflash_guard.pins.lockfile import COMMIT_RE, Artifact, Lockfile, load_lockfile
from dflash_guard.trust.policy import (
    EndpointRules,
    Policy,
    RemoteCode,
    endpoint_url,
    load_policy,
)
from dflash_guard.trust.provenance import (
    CheckResult,
    approval_statement,
    sign_approval,
    write_approval,
)
from dflash_guard.trust.signing import (
    identity_token,
    verify_lockfile_signature,
    verify_model_signatures,
)

STEPS = ("lockfile", "lockfile signature", "verify", "scan", "policy", "model signatures",
         "difftest", "endpoint diff")
PR_HEAD_RE = re.compile(r"(^|/)(pull|pulls|merge-requests)/\d+(/|$)|^(pr|#)[-/#]?\d+$",
                        re.IGNORECASE)
# Semantic-version tags, and llama.cpp's build tags (`b4567`).
RELEASE_RE = re.compile(r"^(refs/tags/)?(v?\d+(\.\d+)+([.\-+]?[0-9A-Za-z.]+)?|b\d+)$")
MAX_LISTED = 3


class Refusal(Exception):
    """A check failed: the deploy is refused for this reason (not an operational error)."""


class Skipped(Exception):
    """A check the policy does not configure: it passes, and the table says why it did not run."""


@dataclasses.dataclass(frozen=True)
class GateResult:
    """The decision, every check that ran (in order), and the approval record if approved."""

    approved: bool
    checks: tuple[CheckResult, ...]
    reason: str | None = None
    record: Path | None = None
    signature: Path | None = None
    statement: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": "approved" if self.approved else "refused",
            "reason": self.reason,
            "checks": [c.to_json() for c in self.checks],
            "not_run": [s for s in STEPS if s not in {c.name for c in self.checks}],
            "record": str(self.record) if self.record else None,
            "signature": str(self.signature) if self.signature else None,
        }


@dataclasses.dataclass
class _Context:
    """What the checks learn along the way and hand to the next ones."""

    lock_path: Path
    policy: Policy
    roots: dict[str, Path]
    today: dt.date
    trust_root: Path | None
    download: bool
    device: str
    inject: str | None
    endpoints: EndpointRules | None = None
    lock: Lockfile | None = None
    locations: dict[str, Path] = dataclasses.field(default_factory=dict)
    tiers: dict[str, str] = dataclasses.field(default_factory=dict)
    scan_summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    difftest: dict[str, Any] = dataclasses.field(default_factory=dict)
    tau: float = 0.0
    endpoint_diff: dict[str, Any] | None = None
    waivers_used: list[str] = dataclasses.field(default_factory=list)

    def waived(self, kind: str, target: str) -> bool:
        """Whether an unexpired waiver covers `kind:target` (and remember that it was used)."""
        waiver = self.policy.waiver(kind, target, self.today)
        if waiver is not None and waiver.id not in self.waivers_used:
            self.waivers_used.append(waiver.id)
        return waiver is not None


def _listed(problems: list[str]) -> str:
    more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
    return "; ".join(problems[:MAX_LISTED]) + more


def is_pr_head(ref: str | None) -> bool:
    """A ref naming a pull/merge request (`refs/pull/52816/head`, `pr-52816`, `#52816`)."""
    return bool(ref and PR_HEAD_RE.search(ref))


def is_release(ref: str | None) -> bool:
    """A ref naming a release tag (`v0.11.0`, `refs/tags/v0.5.3`, `0.5.3rc1`, `b4567`)."""
    return bool(ref and RELEASE_RE.match(ref))


def artifact_key(artifact: Artifact) -> str:
    """How waivers and records name an artifact: its Hub repo, or `local:NAME`."""
    return artifact.repo if artifact.source == "hub" and artifact.repo else f"local:{artifact.name}"


# --- the checks ------------------------------------------------------------------------------


def check_lockfile(ctx: _Context) -> str:
    """Schema (by loading it) and pins: target and drafter present, revisions full SHAs."""
    ctx.lock = lock = load_lockfile(ctx.lock_path)
    missing = [role for role in ("target", "drafter") if lock.artifact(role) is None]
    if missing:
        raise Refusal(f"the lockfile locks no {' and no '.join(missing)}: the gate needs the pair")
    problems = []
    if ctx.policy.require_full_sha:
        for artifact in lock.artifacts:
            if artifact.source == "hub" and not COMMIT_RE.match(artifact.revision or ""):
                problems.append(f"{artifact.role} {artifact.repo}: revision "
                                f"{artifact.revision or '(default branch)'!r} is not a full SHA")
            for ref in artifact.code_refs:
                if not COMMIT_RE.match(ref.revision or ""):
                    problems.append(f"{artifact.role} code {ref.repo}: revision "
                                    f"{ref.revision or '(default branch)'!r} is not a full SHA")
    if problems:
        raise Refusal(_listed(problems) + " (policy: artifacts.require_full_sha)")
    return (f"{len(lock.artifacts)} artifacts and {len(lock.engines)} engine(s) pinned, "
            f"{lock.digest()[:19]}")


def check_lockfile_signature(ctx: _Context) -> str:
    checks = verify_lockfile_signature(
        ctx.lock_path, ctx.policy.lockfile_signers,
        required=ctx.policy.lockfile_signature_required, trust_root=ctx.trust_root,
    )
    failed = [c for c in checks if not c.ok]
    if failed:
        raise Refusal(_listed([f"{Path(c.signature).name}: {c.reason}" for c in failed]))
    if not checks:
        return "not signed (the policy does not require it)"
    return "; ".join(f"signed by {c.signer}" for c in checks)


def check_verify(ctx: _Context) -> str:
    from dflash_guard.pins.verify import verify_lock

    assert ctx.lock is not None
    report = verify_lock(ctx.lock, ctx.roots, download=ctx.download)
    if not report.ok:
        raise Refusal(_listed([f"{p.role}/{p.path}: {_problem(p.kind)}" for p in report.problems]))
    ctx.locations = dict(report.locations)
    return f"{report.files_checked} files match byte for byte"


def _problem(kind: str) -> str:
    if kind in ("size", "sha256"):
        return f"{kind} differs from the lock"
    return {"missing": "missing", "extra": "not in the lock", "symlink": "unsafe symlink",
            "path": "unsafe path"}.get(kind, kind)


def check_scan(ctx: _Context) -> str:
    from dflash_guard.scan import Severity, scan_paths

    assert ctx.lock is not None
    fail_on = Severity.parse(ctx.policy.fail_on)
    problems: list[str] = []
    totals = {"findings": 0, "failing": 0, "remote_code": 0, "pickle_files": 0}
    per_role: dict[str, Any] = {}
    for artifact in ctx.lock.artifacts:
        folder = ctx.locations.get(artifact.role)
        if folder is None:
            continue
        tier = ctx.tiers[artifact.role] = ctx.policy.tier_of(artifact.source, artifact.repo)
        rule = ctx.policy.rule(tier)
        is_drafter = artifact.role == "drafter"
        report = scan_paths(
            [folder],
            target=ctx.locations.get("target") if is_drafter else None,
            reviewed_sha256=ctx.policy.reviewed_sha256,
            param_budget=ctx.policy.drafter_max_params if is_drafter else None,
        )
        failing = [f for f in report.findings
                   if f.severity >= fail_on and not ctx.waived("scan", f.rule_id)]
        problems += [f"{artifact.role}/{f.file}: {f.rule_id} ({f.severity.name}): {f.message}"
                     for f in failing]
        for code in report.remote_code:
            if rule.remote_code is RemoteCode.allow or ctx.waived("remote-code", code.sha256):
                continue
            if rule.remote_code is RemoteCode.deny:
                problems.append(f"{artifact.role}/{code.path}: remote code is denied for the "
                                f"{tier} tier")
            elif not code.reviewed:
                problems.append(f"{artifact.role}/{code.path}: unreviewed remote code "
                                f"(sha256 {code.sha256}); add it to reviewed_code after review")
        if report.pickle_files and not rule.pickle_allowed and not ctx.waived(
                "pickle", artifact_key(artifact)):
            problems.append(f"{artifact.role}: pickle-format weights are not allowed for the "
                            f"{tier} tier: {', '.join(report.pickle_files[:MAX_LISTED])}")
        budget = ctx.policy.drafter_max_params
        if is_drafter and report.param_count is not None and report.param_count > budget:
            problems.append(f"drafter: {report.param_count:,} parameters exceed the policy's "
                            f"budget of {budget:,} (drafter.max_params)")
        per_role[artifact.role] = {**report.to_json(fail_on)["summary"],
                                   "param_count": report.param_count}
        totals["findings"] += len(report.findings)
        totals["failing"] += len(failing)
        totals["remote_code"] += len(report.remote_code)
        totals["pickle_files"] += len(report.pickle_files)
    ctx.scan_summary = {"fail_on": fail_on.name, **totals, "roles": per_role}
    if problems:
        raise Refusal(_listed(problems))
    return (f"{totals['findings']} findings, none at or above {fail_on.name}; "
            f"{totals['remote_code']} remote-code files, {totals['pickle_files']} pickle files")


def check_policy(ctx: _Context) -> str:
    assert ctx.lock is not None
    policy, problems = ctx.policy, []
    for waiver in policy.expired_waivers(ctx.today):
        problems.append(f"waiver {waiver.id} ({waiver.covers}) expired on "
                        f"{waiver.expires.isoformat()}")
    for artifact in ctx.lock.artifacts:
        tier = ctx.tiers.get(artifact.role) or policy.tier_of(artifact.source, artifact.repo)
        ctx.tiers[artifact.role] = tier
        key = artifact_key(artifact)
        if policy.rule(tier).staging_required and not (
            policy.staging_approved(artifact.repo, artifact.commit) or ctx.waived("staging", key)
        ):
            problems.append(f"{artifact.role} {artifact.label} ({tier} tier) has no recorded "
                            "staging approval for this commit")
        if artifact.role == "gguf" and policy.gguf_requires_comparison and not (
            policy.gguf_compared(artifact.repo, artifact.commit)
            or ctx.waived("gguf-comparison", key)
        ):
            problems.append(f"gguf {artifact.label} has no recorded comparison against the "
                            "safetensors path")
    for engine in ctx.lock.engines:
        ref = engine.ref or ""
        if is_pr_head(ref):
            if not policy.allow_pr_head:
                problems.append(f"engine {engine.name} is a PR-head build ({ref}): the policy "
                                "allows none")
            elif not ctx.waived("engine", engine.name):
                problems.append(f"engine {engine.name} is a PR-head build ({ref}) without a "
                                f"waiver (engine:{engine.name})")
        elif policy.require_release and not is_release(ref):
            problems.append(f"engine {engine.name} is not a release build "
                            f"(ref {ref or 'not recorded'!r})")
    if problems:
        raise Refusal(_listed(problems))
    tiers = ", ".join(f"{role}: {tier}" for role, tier in sorted(ctx.tiers.items()))
    used = f"; waivers used: {', '.join(ctx.waivers_used)}" if ctx.waivers_used else ""
    return f"tiers {tiers}{used}"


def check_model_signatures(ctx: _Context) -> str:
    assert ctx.lock is not None
    checks = verify_model_signatures(ctx.lock, ctx.locations, ctx.policy,
                                     trust_root=ctx.trust_root)
    failed = [f"{c.subject}/model.sig: {c.reason}" for c in checks if not c.ok]
    if failed:
        raise Refusal(_listed(failed))
    signed = [f"{c.subject} by {c.signer}" for c in checks]
    return "; ".join(signed) if signed else "none present, none required"


def check_difftest(ctx: _Context) -> str:
    from dflash_guard.lossless.local import run_difftest
    from dflash_guard.lossless.reference import parse_fault

    rules = ctx.policy.difftest
    report = run_difftest(
        ctx.locations["target"], ctx.locations["drafter"],
        prompts=Path(rules.prompts) if rules.prompts else None,
        max_new_tokens=rules.max_new_tokens, device=ctx.device, inject=parse_fault(ctx.inject),
    )
    near_ties = [d for d in report.divergences
                 if d.top2_margin is not None and d.top2_margin < rules.near_tie_allowance]
    real = [d for d in report.divergences if d not in near_ties]
    ctx.tau = report.tau
    ctx.difftest = {
        "prompts": len(report.results),
        "maxNewTokens": rules.max_new_tokens,
        "identical": report.identical,
        "divergences": [d.id for d in report.divergences],
        "nearTies": [d.id for d in near_ties],
        "tau": round(report.tau, 4),
        "minTau": rules.min_tau,
        "warnings": list(report.warnings),
    }
    if real:
        first = real[0]
        raise Refusal(f"{len(real)} of {len(report.results)} prompts diverge from the target's "
                      f"greedy output (first: {first.id} at token {first.first_diff_position}, "
                      f"margin {first.top2_margin})")
    if report.tau < rules.min_tau:
        raise Refusal(f"mean acceptance length {report.tau:.2f} is below the policy's minimum "
                      f"{rules.min_tau}")
    ties = f", {len(near_ties)} near-tie divergences tolerated" if near_ties else ""
    return (f"{len(report.results)} prompts identical{ties}; tau {report.tau:.2f} "
            f">= {rules.min_tau}")


def check_endpoint_diff(ctx: _Context) -> str:
    """Diff the live baseline and candidate engines: a hard divergence always refuses, more
    near-ties than `max_near_ties` refuse, and so does an endpoint the gate cannot use."""
    from dflash_guard.lossless.endpoint import EndpointError, load_prompts, run_endpoint_diff
    from dflash_guard.lossless.local import DEFAULT_PROMPTS

    rules = ctx.endpoints
    if rules is None:
        raise Skipped("not configured (the policy has no difftest.endpoints)")
    api_key = os.environ[rules.api_key_env].strip() if rules.api_key_env else None
    try:
        report = run_endpoint_diff(
            rules.baseline, rules.candidate,
            load_prompts(Path(rules.prompts) if rules.prompts else DEFAULT_PROMPTS),
            model=rules.model, max_new_tokens=rules.max_new_tokens,
            concurrency=rules.concurrency, api_key=api_key, timeout=rules.timeout_s,
            near_tie_margin=rules.near_tie_margin,
            metrics_url=metrics_url(rules.candidate) if rules.metrics else None,
        )
    except EndpointError as error:
        raise Refusal(f"{error} (a gate that cannot check does not approve)") from None
    hard, ties = report.hard_divergences, report.near_ties
    acceptance = report.acceptance
    ctx.endpoint_diff = {
        "baseline": report.baseline,
        "candidate": report.candidate,
        "model": rules.model,
        "prompts": len(report.results),
        "maxNewTokens": rules.max_new_tokens,
        "identical": sum(r.status == "identical" for r in report.results),
        "nearTies": len(ties),
        "maxNearTies": rules.max_near_ties,
        "nearTieMargin": rules.near_tie_margin,
        "hard": len(hard),
        "divergences": [r.prompt_id for r in (*hard, *ties)],
        "acceptance": dataclasses.asdict(acceptance) if acceptance else None,
        "warnings": list(report.warnings),
    }
    total = len(report.results)
    if hard:
        first = hard[0]
        raise Refusal(f"{len(hard)} of {total} prompts diverge between baseline and candidate "
                      f"(first: {first.prompt_id} at token {first.position}"
                      f"{': ' + first.detail if first.detail else ''})")
    if len(ties) > rules.max_near_ties:
        names = ", ".join(r.prompt_id for r in ties)
        raise Refusal(f"{len(ties)} near-tie divergences ({names}), more than the policy's "
                      f"max_near_ties {rules.max_near_ties}")
    tau = acceptance.mean_acceptance_length if acceptance else None
    figures = f"; candidate tau {tau:.2f}" if tau is not None else ""
    ties_note = f", {len(ties)} near-ties tolerated" if ties else ""
    return f"{total} prompts match on the live endpoints{ties_note}{figures}"


def metrics_url(candidate: str) -> str:
    """The candidate server's Prometheus endpoint: `/metrics` at its origin (vLLM, SGLang)."""
    parts = urlsplit(candidate)
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def resolve_endpoints(policy: Policy, baseline: str | None = None,
                      candidate: str | None = None) -> EndpointRules | None:
    """The endpoint diff to run: the policy's, with URLs overridden at gate time; the policy's
    settings with both URLs when it names none; None when neither configures one."""
    from dflash_guard.lossless.endpoint import redact_url

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
        if not endpoint_url(url):
            raise InputError(f"{flag}: not an http(s) URL without credentials: "
                             f"{redact_url(url)}")
    if rules.api_key_env and not os.environ.get(rules.api_key_env, "").strip():
        raise InputError(f"difftest.endpoints.api_key_env names {rules.api_key_env}, but that "
                         "variable is unset or empty")
    return rules


CHECKS: tuple[tuple[str, Callable[[_Context], str]], ...] = (
    ("lockfile", check_lockfile),
    ("lockfile signature", check_lockfile_signature),
    ("verify", check_verify),
    ("scan", check_scan),
    ("policy", check_policy),
    ("model signatures", check_model_signatures),
    ("difftest", check_difftest),
    ("endpoint diff", check_endpoint_diff),
)


# --- the gate --------------------------------------------------------------------------------


def run_gate(
    lock_path: Path,
    policy_path: str | Path | None = None,
    roots: Mapping[str, Path] | None = None,
    *,
    out: Path | None = None,
    sign: bool = False,
    key: Path | None = None,
    trust_root: Path | None = None,
    download: bool = False,
    device: str = "cpu",
    inject: str | None = None,
    baseline: str | None = None,
    candidate: str | None = None,
    interactive: bool = False,
    today: dt.date | None = None,
    on_check: Callable[[CheckResult], None] | None = None,
) -> GateResult:
    """Run every check in order; refuse at the first failure; write `out` only on approval.

    `baseline` and `candidate` override the policy's endpoint URLs (or, with both, run the
    endpoint diff under a policy that names none)."""
    if sign and key is not None:
        raise InputError("--sign and --key are exclusive: sign with Sigstore or with a key")
    if key is not None and not key.is_file():
        raise InputError(f"--key {key}: no such file")
    if (sign or key is not None) and out is None:
        raise InputError("signing the approval needs --out FILE")
    # Ask for the Sigstore credential before any work, so a missing one fails at once.
    policy = load_policy(policy_path)
    endpoints = resolve_endpoints(policy, baseline, candidate)
    token = identity_token(interactive) if sign else None
    ctx = _Context(
        lock_path=Path(lock_path), policy=policy, roots=dict(roots or {}),
        today=today or dt.datetime.now(dt.UTC).date(), trust_root=trust_root,
        download=download, device=device, inject=inject, endpoints=endpoints,
    )
    results: list[CheckResult] = []
    for name, check in CHECKS:
        skipped = False
        try:
            detail, ok = check(ctx), True
        except Skipped as skip:
            detail, ok, skipped = str(skip), True, True
        except Refusal as refusal:
            detail, ok = str(refusal), False
        results.append(CheckResult(name, ok, detail, skipped))
        if on_check is not None:
            on_check(results[-1])
        if not ok:
            return GateResult(False, tuple(results), reason=f"{name}: {detail}")
    assert ctx.lock is not None
    statement = approval_statement(
        ctx.lock_path, ctx.lock, ctx.policy, checks=results, scan_summary=ctx.scan_summary,
        difftest=ctx.difftest, acceptance_length=round(ctx.tau, 4), tiers=ctx.tiers,
        waivers_used=ctx.waivers_used, endpoint_diff=ctx.endpoint_diff,
    )
    signature = None
    if out is not None:
        write_approval(statement, out)
        if sign or key is not None:
            signature = sign_approval(out, key=key, token=token, interactive=interactive)
    return GateResult(True, tuple(results), record=out, signature=signature, statement=statement)
