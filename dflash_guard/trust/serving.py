"""The serving record `launch --verify-served` writes, read back by `monitor --record`.

An in-toto Statement v1 (`serving/v1`) saying that one started engine served the approved deploy:
its subject is what the launch was authorised by (the approval record when launched from one,
else the lockfile), each with the sha256 of its bytes; its predicate binds that digest, the
lock's content digest, the engine's identity (the program run, by path and sha256, and its
command line with variables as names), the confinement ruleset's digest (null: not confined),
the endpoint, and the served diff's verdict with its summary (the reference diff with logprobs
and the drafter's acceptance check). It is written atomically and signed like an approval
record (`RECORD.sig`, `provenance.sign_approval`), so `verify_approval` checks its signatures.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflash_guard import __version__
from dflash_guard.errors import InputError
from dflash_guard.fileio import loads_json, read_input_text, write_atomic
from dflash_guard.trust.intoto import Statement, Subject, dumps_json

if TYPE_CHECKING:
    from dflash_guard.trust.policy import Policy

PREDICATE_TYPE = "https://github.com/dflash-guard/dflash-guard/serving/v1"
SERVING_MAX_BYTES = 4 * 1024 * 1024


def serving_statement(*, authority: tuple[str, str], lock_digest: str, policy: Policy,
                      approval: Mapping[str, Any] | None, engine: Mapping[str, Any],
                      ruleset_digest: str | None, endpoint: str, passed: bool, reason: str,
                      diff: Mapping[str, Any], time: dt.datetime | None = None) -> Statement:
    """The serving record. `authority` is the (name, sha256) of the approval record the launch
    came from, else of the lockfile; `approval` names that record (None: launched from a lock
    alone); `diff` is the served diff's summary (`ReferenceDiffReport.summary()`)."""
    when = (time or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
    drafter = diff.get("drafter")
    tau = drafter.get("engine_tau") if isinstance(drafter, dict) else None
    predicate: dict[str, Any] = {
        "passed": passed,
        "reason": reason,
        "served_at": when.isoformat().replace("+00:00", "Z"),
        "tool": {"name": "dflash-guard", "version": __version__},
        "policy": _policy_descriptor(policy),
        "approval": dict(approval) if approval is not None else None,
        "lockfile": {"content_digest": lock_digest},
        "engine": dict(engine),
        "confinement": {"ruleset_digest": ruleset_digest},  # null: the engine ran unconfined
        "endpoint": endpoint,
        "acceptance_length": tau if isinstance(tau, int | float) else None,
        "served_diff": dict(diff),
    }
    name, digest = authority
    return Statement((Subject(name, {"sha256": digest}),), PREDICATE_TYPE, predicate)


def _policy_descriptor(policy: Policy) -> dict[str, Any]:
    """The policy as an approval record names it: by the digest of its closure (its text and
    every file it names), listed, so `provenance.policy_binding` checks it the same way."""
    from dflash_guard.trust.closure import policy_closure
    from dflash_guard.trust.policy import is_builtin

    closure = policy_closure(policy)
    return {"name": policy.name,
            "uri": (f"builtin:{Path(policy.source).stem}" if is_builtin(policy)
                    else Path(policy.source).name),
            "digest": {"sha256": closure.digest.removeprefix("sha256:")},
            "closure": closure.to_json()}


def write_serving(statement: Statement, out: Path) -> None:
    """Write the record atomically (whole or not at all)."""
    try:
        write_atomic(out, dumps_json(statement.to_json()))
    except OSError as error:
        raise InputError(f"cannot write serving record {out}: {error}") from None


def is_serving_record(path: Path) -> bool:
    """Whether the file claims to be a serving record (by its predicate type)."""
    text = read_input_text(path, "record", SERVING_MAX_BYTES)
    data = loads_json(text, f"record {path}")
    return isinstance(data, dict) and data.get("predicateType") == PREDICATE_TYPE


def read_serving(path: Path) -> Statement:
    """Read a serving record; `InputError` when it is missing or not one."""
    document = loads_json(read_input_text(path, "serving record", SERVING_MAX_BYTES),
                          f"serving record {path}")
    try:
        return Statement.from_json(document, PREDICATE_TYPE, "a dflash-guard serving record")
    except ValueError as error:
        raise InputError(f"{path}: {error}") from None


def served_tau(statement: Statement) -> float | None:
    """The engine's mean acceptance length over its served diff, when the diff passed."""
    if statement.predicate.get("passed") is not True:
        return None
    tau = statement.predicate.get("acceptance_length")
    return float(tau) if isinstance(tau, int | float) and not isinstance(tau, bool) else None


def checked_served_tau(path: Path, policy: Policy) -> float:
    """The tau of a serving record about `policy`, signed by its approval signers, whose
    served diff passed; anything less is an `InputError`, never a baseline."""
    from dflash_guard.trust.provenance import policy_binding, verify_approval

    statement = read_serving(path)
    if (problem := policy_binding(statement.to_json(), policy)) is not None:
        raise InputError(f"--record {path}: {problem}")
    checks = verify_approval(path, policy.approval_signers)
    if not all(c.ok for c in checks):
        reasons = "; ".join(c.reason for c in checks if not c.ok)
        raise InputError(f"--record {path}: not signed by an approval signer of the policy "
                         f"({reasons})")
    if statement.predicate.get("passed") is not True:
        raise InputError(f"--record {path}: its served diff did not pass "
                         f"({statement.predicate.get('reason')})")
    tau = served_tau(statement)
    if tau is None or tau < 1:
        raise InputError(f"--record {path}: the serving record holds no acceptance length (tau):"
                         " a --baseline launch drafts nothing to watch")
    return tau
