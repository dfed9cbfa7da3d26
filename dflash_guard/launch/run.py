"""`launch ENGINE`: the plan and the command, or the refusal, as one report (`LaunchReport`)."""

from __future__ import annotations

import dataclasses

from dflash_guard.launch.engines import LaunchCommand, build_command, check_extras
from dflash_guard.launch.plan import ENGINES, LaunchOptions, plan_launch
from dflash_guard.outcome import Outcome
from dflash_guard.pins.lockfile import Lockfile
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.trust.policy import Policy


@dataclasses.dataclass(frozen=True)
class LaunchReport:
    """The verdict of a launch and, when it passed, the command that serves the lock."""

    engine: str
    outcome: Outcome
    command: LaunchCommand | None = None

    @property
    def passed(self) -> bool:
        return self.outcome.ok

    def to_json(self) -> dict[str, object]:
        command = self.command.to_json() if self.command is not None else {}
        return {**command, "engine": self.engine, "passed": self.passed,
                "verdict": self.outcome.verdict.value, "reason": self.outcome.reason}


def run_launch(lock: Lockfile, policy: Policy, options: LaunchOptions,
               progress: Progress = NO_PROGRESS) -> LaunchReport:
    """The command serving exactly what `lock` pins under `policy`, or the refusal; engine
    arguments after `--` are checked before any folder is hashed."""
    caps = policy.launch.caps.get(options.engine, {}) if policy.launch else {}
    if options.engine in ENGINES:  # else plan_launch says which engines there are
        check_extras(options.engine, list(options.extra), caps)
    planned = plan_launch(lock, policy, options, progress)
    if isinstance(planned, Outcome):
        return LaunchReport(options.engine, planned)
    command = build_command(planned)
    verified = ", ".join(planned.verified) or "none (Hub repos at their locked commits)"
    return LaunchReport(options.engine, Outcome.passed(f"folders verified: {verified}"), command)
