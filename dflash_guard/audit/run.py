"""`run_audit`: load the feeds, judge them, match every advisory against the lock, report.

The library entry point the CLI and the gate share. A feed that cannot be trusted (a signature
that fails, unsigned where signatures are required, stale) is a refusal like an affecting
advisory (exit 1); a feed that cannot be read or holds a malformed record is an `InputError`
(exit 2). No feed at all is an input error too: an audit against nothing never means clean.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflash_guard import rules
from dflash_guard.audit.feeds import Feed, FeedRules, feed_problems, load_feed, signed_by
from dflash_guard.audit.match import AuditFinding, lock_subjects, match_lock
from dflash_guard.audit.osv import Advisory
from dflash_guard.errors import InputError
from dflash_guard.pins.lockfile import Engine, load_lockfile
from dflash_guard.severity import Severity
from dflash_guard.trust.engines import NO_RULES, EngineBuild, EngineRules, engine_build
from dflash_guard.trust.gitclone import GitClone

if TYPE_CHECKING:
    from dflash_guard.trust.policy import AdvisoryRules


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """The feeds read, why any of them is refused, and every finding against the lock."""

    lock: str
    lock_digest: str
    feeds: tuple[Feed, ...]
    feed_problems: tuple[str, ...]
    findings: tuple[AuditFinding, ...]
    fail_on: Severity
    subjects: int
    advisories: int
    overrides_refused: tuple[str, ...] = ()  # unsigned records that tried to replace signed ones

    @property
    def failing(self) -> list[AuditFinding]:
        """Findings at or above `fail_on` (affecting and undecided alike)."""
        return [f for f in self.findings if f.severity >= self.fail_on]

    @property
    def passed(self) -> bool:
        return not self.feed_problems and not self.failing

    def summary(self) -> str:
        """One line: the verdict and the counts."""
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{verdict}: {self.subjects} pinned subjects against {self.advisories} "
                f"advisories: {len(self.ids(rules.ADV_AFFECTED.id))} affecting, "
                f"{len(self.ids(rules.ADV_UNKNOWN.id))} undecided, {len(self.failing)} findings "
                f"at or above {self.fail_on.name}, {len(self.feed_problems)} feed refusals")

    def ids(self, rule_id: str) -> list[str]:
        """The advisory ids of the findings of one rule, sorted, once each."""
        return sorted({f.advisory for f in self.findings if f.rule_id == rule_id})

    def record_section(self) -> dict[str, object]:
        """The approval record's `advisories` section: each feed by digest, who signed the
        feeds, the threshold, and the advisory ids affecting or undecided."""
        return {
            "feeds": [{"uri": f.source, "digest": {"sha256": f.digest.removeprefix("sha256:")},
                       "newest": f.to_json()["newest"]} for f in self.feeds],
            "signers": signed_by(self.feeds),
            "fail_on": self.fail_on.name,
            "affected": self.ids(rules.ADV_AFFECTED.id),
            "unknown": self.ids(rules.ADV_UNKNOWN.id),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "lock": self.lock,
            "lock_digest": self.lock_digest,
            "passed": self.passed,
            "fail_on": self.fail_on.name,
            "summary": {
                "subjects": self.subjects,
                "advisories": self.advisories,
                "affected": self.ids(rules.ADV_AFFECTED.id),
                "unknown": self.ids(rules.ADV_UNKNOWN.id),
                "failing": len(self.failing),
            },
            "feeds": [f.to_json() for f in self.feeds],
            "feed_problems": list(self.feed_problems),
            "overrides_refused": list(self.overrides_refused),
            "findings": [f.to_json() for f in self.findings],
        }


def _latest(feeds: Sequence[Feed]) -> tuple[list[Advisory], list[str]]:
    """Every record once, and the overrides refused. An id in two feeds counts in its most
    recently modified version among the signed records when any is signed: an unsigned record
    never replaces (narrows, withdraws) a signed one, whatever its `modified` says."""
    by_id: dict[str, Advisory] = {}
    refused: list[str] = []
    for feed in feeds:
        for advisory in feed.advisories:
            known = by_id.get(advisory.id)
            if known is not None and known.signed != advisory.signed:
                unsigned = known if advisory.signed else advisory
                refused.append(f"{unsigned.id}: the unsigned record in {unsigned.source} is "
                               "ignored; a signed record of the same id wins")
                if advisory.signed:
                    by_id[advisory.id] = advisory
                continue
            if known is None or advisory.modified > known.modified:
                by_id[advisory.id] = advisory
    return [by_id[key] for key in sorted(by_id)], refused


def _engine_build(engine: Engine, clone: Path | None, rules: EngineRules) -> EngineBuild:
    """What the evidence proves of an engine; a clone without its commit proves nothing."""
    try:
        return engine_build(engine, Path(clone) if clone is not None else None, rules)
    except InputError as error:
        return dataclasses.replace(engine_build(engine, None, rules), how=str(error))


def run_audit(
    lock_path: Path,
    sources: Sequence[str],
    *,
    rules: FeedRules | None = None,
    clones: Mapping[str, Path] | None = None,
    fail_on: Severity = Severity.low,
    now: dt.datetime | None = None,
    engines: EngineRules = NO_RULES,
) -> AuditReport:
    """Audit the lock at `lock_path` against the feeds in `sources` (paths or URLs).

    `clones` maps an engine name (or a Hub repo `ORG/NAME`) to a local git clone, so `GIT`
    ranges over it are decided on its commit graph; `engines` is the policy's evidence of
    engine identities and releases."""
    if not sources:
        raise InputError("no advisory feed: pass --advisories DIR|FILE|URL or a policy with an "
                         "advisories section (an audit against nothing never means clean)")
    rules = rules or FeedRules()
    lock = load_lockfile(lock_path)
    builds = {e.name: _engine_build(e, (clones or {}).get(e.name), engines)
              for e in lock.engines}
    subjects = lock_subjects(lock, builds)
    known = {s.name for s in subjects if s.kind != "pypi"}
    repos = {}
    for name, path in (clones or {}).items():
        if name not in known:
            raise InputError(f"--engine-repo {name}: the lock pins no engine or Hub repo named "
                             f"{name!r} (known: {', '.join(sorted(known)) or 'none'})")
        repos[name] = GitClone(Path(path))
    with tempfile.TemporaryDirectory(prefix="dflash-guard-feeds-") as tmp:
        feeds = tuple(load_feed(source, rules, Path(tmp)) for source in sources)
    when = now or dt.datetime.now(dt.UTC)
    problems = tuple(p for feed in feeds for p in feed_problems(feed, rules, when))
    advisories, overrides = _latest(feeds)
    findings = match_lock(advisories, subjects, repos)
    return AuditReport(str(lock_path), lock.digest(), feeds, problems, tuple(findings),
                       fail_on, len(subjects), len(advisories), tuple(overrides))


def run_policy_audit(
    lock_path: Path,
    rules: AdvisoryRules,
    *,
    extra_sources: Sequence[str] = (),
    clones: Mapping[str, Path] | None = None,
    trust_root: Path | None = None,
    now: dt.datetime | None = None,
    engines: EngineRules = NO_RULES,
) -> AuditReport:
    """The audit a policy's `advisories` section asks for (the gate's step, `audit --policy`);
    `engines`: the policy's `engines.repositories`."""
    feed_rules = FeedRules(rules.signers, rules.allow_unsigned,
                           dt.timedelta(days=rules.max_age_days), trust_root)
    return run_audit(lock_path, [*rules.feeds, *extra_sources], rules=feed_rules, clones=clones,
                     fail_on=rules.fail_on, now=now, engines=engines)
