"""`launch ENGINE`: the plan and the command, or the refusal, as one report (`LaunchReport`).

From an approval record (`Approval`) the record is verified first exactly as `verify-approval`
does it (`trust.provenance.check_approval`: the policy digest, the signatures, the lockfile, every
locked folder walked again), then the engine is proved to be the locked one
(`engine_identity`), and only then is the command planned from the folders that were verified.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.launch.engine_identity import locked_engine
from dflash_guard.launch.engines import LaunchCommand, build_command, check_extras
from dflash_guard.launch.plan import ENGINES, LaunchOptions, LaunchPlan, plan_launch
from dflash_guard.outcome import Outcome
from dflash_guard.pins.lockfile import Lockfile
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.trust.policy import Policy
from dflash_guard.trust.provenance import ApprovalVerdict, check_approval


@dataclasses.dataclass(frozen=True)
class Approval:
    """Launch from this approval record of the lockfile at `lock_path`, whose bytes launch
    read once (`lock_data`): the record is checked against the same bytes the command is
    planned from, never a second read of the path."""

    record: Path
    lock_path: Path
    lock_data: bytes
    trust_root: Path | None = None
    wheels: tuple[Path, ...] = ()  # where the locked wheel of a package engine may be


@dataclasses.dataclass(frozen=True)
class LaunchReport:
    """The verdict of a launch and, when it passed, the command that serves the lock."""

    engine: str
    outcome: Outcome
    command: LaunchCommand | None = None
    plan: LaunchPlan | None = None  # what the command was written from (`--exec` confines it)

    @property
    def passed(self) -> bool:
        return self.outcome.ok

    def to_json(self) -> dict[str, object]:
        command = self.command.to_json() if self.command is not None else {}
        return {**command, "engine": self.engine, "passed": self.passed,
                "verdict": self.outcome.verdict.value, "reason": self.outcome.reason}


def approval_problem(verdict: ApprovalVerdict) -> str | None:
    """Why `verify-approval` refuses the record (None: it is verified)."""
    if verdict.passed:
        return None
    if verdict.policy_problem:
        return f"wrong policy: {verdict.policy_problem}"
    bad = [c for c in verdict.signatures if not c.ok]
    if bad or not verdict.signatures:
        return "signature: " + "; ".join(c.reason for c in bad)
    more = f" (and {len(verdict.problems) - 3} more)" if len(verdict.problems) > 3 else ""
    return "files: " + "; ".join(verdict.problems[:3]) + more


def run_launch(lock: Lockfile, policy: Policy, options: LaunchOptions,
               progress: Progress = NO_PROGRESS, approval: Approval | None = None
               ) -> LaunchReport:
    """The command serving exactly what `lock` pins under `policy`, or the refusal; engine
    arguments after `--` are checked before any folder is hashed. With `approval`, the record is
    verified and the engine proved before anything is planned."""
    caps = policy.launch.caps.get(options.engine, {}) if policy.launch else {}
    if options.engine == "ollama" and options.extra:
        raise InputError("launch ollama: no engine arguments after `--` (the Modelfile it "
                         "writes is the whole configuration)")
    if options.engine in ENGINES and options.engine != "ollama":  # else plan_launch says
        check_extras(options.engine, list(options.extra), caps)
    proofs: list[str] = []
    engine_args: tuple[str, ...] = ()
    if approval is None and policy.launch is not None and policy.launch.require_approval:
        return LaunchReport(options.engine, Outcome.refused(
            f"the policy {policy.name!r} launches only from a verified approval "
            "(launch.require_approval): pass --approval RECORD"))
    if approval is not None:
        if options.engine not in ENGINES:
            raise InputError(f"engine {options.engine!r}: expected one of {', '.join(ENGINES)}")
        if options.engine == "ollama":
            return LaunchReport(options.engine, Outcome.refused(
                "--approval: an ollama binary cannot be proved against the lock yet (its "
                "engine entry pins a source commit; docs/limits.md)"))
        verdict = check_approval(approval.record, policy, roots=options.roots,
                                 lock_path=approval.lock_path, trust_root=approval.trust_root,
                                 lock_data=approval.lock_data)
        if (problem := approval_problem(verdict)) is not None:
            return LaunchReport(options.engine, Outcome.refused(
                f"approval {approval.record} not verified: {problem}"))
        engine = locked_engine(lock, options.engine, options.program, list(approval.wheels))
        if isinstance(engine, Outcome):
            return LaunchReport(options.engine, engine)
        options = dataclasses.replace(options, approved=verdict.locations,
                                      program=engine.program)
        engine_args = engine.args
        proofs = [f"approval {approval.record} verified ({verdict.checked} approved files "
                  f"match the disk)", f"engine: {engine.proof}"]
    planned = plan_launch(lock, policy, options, progress)
    if isinstance(planned, Outcome):
        return LaunchReport(options.engine, planned)
    if options.engine == "ollama":
        return _ollama(lock, policy, planned)
    command = build_command(planned)
    if engine_args:  # the interpreter's own options, right after the program
        command = dataclasses.replace(command, argv=(command.argv[0], *engine_args,
                                                     *command.argv[1:]))
    verified = "; ".join([*proofs, "folders verified: " + ", ".join(planned.verified)])
    return LaunchReport(options.engine, Outcome.passed(verified), command, planned)


def _ollama(lock: Lockfile, policy: Policy, plan: LaunchPlan) -> LaunchReport:
    """`launch ollama`: the Modelfile written from `plan`, and the `ollama create` command."""
    from dflash_guard.launch.ollama import model_name, reviewed_template, write_modelfile

    template = reviewed_template(policy, plan.options.template)
    if isinstance(template, Outcome):
        return LaunchReport("ollama", template)
    path = plan.options.modelfile or Path("Modelfile")
    written = write_modelfile(plan, template, path, model_name(lock, plan.options.baseline))
    if isinstance(written, Outcome):
        return LaunchReport("ollama", written)
    return LaunchReport("ollama", Outcome.passed(
        f"Modelfile {path} written; folders verified: " + ", ".join(plan.verified)),
        written, plan)
