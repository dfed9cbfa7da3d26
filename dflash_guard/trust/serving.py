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
from typing import Any

from dflash_guard import __version__
from dflash_guard.errors import InputError
from dflash_guard.fileio import loads_json, read_input_text, write_atomic
from dflash_guard.trust.intoto import Statement, Subject, dumps_json

PREDICATE_TYPE = "https://github.com/dflash-guard/dflash-guard/serving/v1"
SERVING_MAX_BYTES = 4 * 1024 * 1024


def serving_statement(*, authority: tuple[str, str], lock_digest: str,
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


def write_serving(statement: Statement, out: Path) -> None:
    """Write the record atomically (whole or not at all)."""
    try:
        write_atomic(out, dumps_json(statement.to_json()))
    except OSError as error:
        raise InputError(f"cannot write serving record {out}: {error}") from None


def is_serving_record(data: Any) -> bool:
    """Whether parsed JSON claims to be a serving record (by its predicate type)."""
    return isinstance(data, dict) and data.get("predicateType") == PREDICATE_TYPE


def read_serving(path: Path) -> Statement:
    """Read a serving record; `InputError` when it is missing or not one."""
    text = read_input_text(path, "serving record", SERVING_MAX_BYTES)
    try:
        return Statement.from_json(loads_json(text, f"serving record {path}"), PREDICATE_TYPE,
                                   "a dflash-guard serving record")
    except ValueError as error:
        raise InputError(f"{path}: {error}") from None


def served_tau(statement: Statement) -> float | None:
    """The engine's mean acceptance length over its served diff, when the diff passed."""
    if statement.predicate.get("passed") is not True:
        return None
    tau = statement.predicate.get("acceptance_length")
    return float(tau) if isinstance(tau, int | float) and not isinstance(tau, bool) else None
