"""The approval record the gate writes: an in-toto Statement v1 saying what was approved, why,
and under which policy (`approval/v3`; `trust.provenance` reads, signs and verifies it).

Subjects are the lockfile and every locked file, each with the sha256 the gate computed from the
bytes on disk in this run (the `verify` check's evidence), never one copied from the lock. The
predicate names the policy by digest, the tool, the lock's artifacts (with the tiers the policy
gave them) and engines (`gitCommit` digests), one row per check in run order
(`{"name", "verdict", "reason", "evidence"}`): `evidence` is the check's section when it passed,
null when it was skipped (JSON keys are written sorted, so the run order lives in the list).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from dflash_guard import __version__
from dflash_guard.errors import InputError
from dflash_guard.gate.evidence import JSON, Evidence, PolicyEvidence, VerifiedFiles
from dflash_guard.gate.inputs import LockRead
from dflash_guard.outcome import Outcome
from dflash_guard.pins.lockfile import Engine, Lockfile
from dflash_guard.pins.verify import locked_files
from dflash_guard.trust.closure import PolicyClosure
from dflash_guard.trust.intoto import Statement, Subject
from dflash_guard.trust.policy import Policy, is_builtin
from dflash_guard.trust.provenance import PREDICATE_TYPE


class CheckRow(NamedTuple):
    """One check that ran: its name, its outcome, and its evidence when it passed."""

    name: str
    outcome: Outcome
    evidence: Evidence | None = None

    def to_json(self) -> JSON:
        """The row as reports show it: name, verdict, reason."""
        return {"name": self.name, "verdict": str(self.outcome.verdict),
                "reason": self.outcome.reason}

    def record_json(self) -> JSON:
        """The row as the approval record holds it: with its evidence (null: none)."""
        evidence = self.evidence.to_json() if self.evidence is not None else None
        return {**self.to_json(), "evidence": evidence}


def policy_descriptor(policy: Policy, closure: PolicyClosure) -> JSON:
    """How a record names its policy: `builtin:NAME` for a shipped one, else the file's name;
    the digest of its closure (its text, the built-in it extends and every file it names, each
    listed under `closure` with its sha256: `trust.closure`). A file can never pass for a
    built-in policy, nor a copy beside other files for the original: their digests differ."""
    return {"name": policy.name,
            "uri": (f"builtin:{Path(policy.source).stem}" if is_builtin(policy)
                    else Path(policy.source).name),
            "digest": {"sha256": closure.digest.removeprefix("sha256:")},
            "closure": closure.to_json()}


def _engine_descriptor(engine: Engine) -> JSON:
    descriptor: JSON = {"name": engine.name, "uri": f"git+{engine.url}@{engine.commit}",
                        "digest": {"gitCommit": engine.commit}}
    if engine.ref:
        descriptor["annotations"] = {"ref": engine.ref}
    return descriptor


def _found(rows: Sequence[CheckRow], kind: type[Evidence]) -> Evidence | None:
    return next((r.evidence for r in rows if isinstance(r.evidence, kind)), None)


def approval_statement(lock_read: LockRead, lock: Lockfile, policy: Policy,
                       closure: PolicyClosure, rows: Sequence[CheckRow],
                       time: dt.datetime | None = None) -> JSON:
    """The approval record for a run whose checks all passed (or were skipped), as a dict
    ready for JSON. The lockfile subject is the sha256 of the bytes the checks parsed (read
    once: `LockRead`), never a later read of the path. A locked file the run did not hash is
    an error: it was not checked."""
    verified = _found(rows, VerifiedFiles)
    digests = verified.digests if isinstance(verified, VerifiedFiles) else {}
    lock_path = lock_read.path
    subjects = [Subject(lock_path.name, {"sha256": lock_read.sha256})]
    for name in sorted(locked_files(lock)):
        if name not in digests:
            raise InputError(f"approval record: {name} was not hashed in this run")
        subjects.append(Subject(name, {"sha256": digests[name]}))
    judged = _found(rows, PolicyEvidence)
    tiers = judged.tiers if isinstance(judged, PolicyEvidence) else {}
    waivers = dict.fromkeys(w for r in rows for w in getattr(r.evidence, "waivers", ()))
    when = (time or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
    predicate: JSON = {
        "passed": True,
        "approved_at": when.isoformat().replace("+00:00", "Z"),
        "tool": {"name": "dflash-guard", "version": __version__},
        "policy": policy_descriptor(policy, closure),
        "lockfile": {"name": lock_path.name, "content_digest": lock.digest()},
        "artifacts": [{"role": a.role, "source": a.source, "provenance": a.provenance,
                       "repo": a.repo, "commit": a.commit, "name": a.name,
                       "tier": tiers.get(a.role), "files": len(a.files)}
                      for a in lock.artifacts],
        "engines": [_engine_descriptor(e) for e in lock.engines],
        "checks": [row.record_json() for row in rows],
        "waivers": list(waivers),
    }
    return Statement(tuple(subjects), PREDICATE_TYPE, predicate).to_json()
