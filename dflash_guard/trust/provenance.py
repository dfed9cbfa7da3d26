"""The approval record: an in-toto Statement v1 saying what the gate approved, and why.

Subjects are the lockfile and every locked artifact file, each with the sha256 computed from
the bytes on disk in the gate run (not copied from the lock); the predicate
records the policy (name and digest), the tool version, the engines as resource descriptors with
`gitCommit` digests, the checks that ran, the scan summary, the difftest result, the acceptance
length, the endpoint diff's summary (URLs, never an API key) and the time. The record is written
atomically and can be signed with Sigstore (a DSSE bundle over the statement,
`RECORD.sigstore.json`) or an ECDSA key (`RECORD.sig`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflash_guard import __version__
from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input, read_input_text, write_atomic
from dflash_guard.outcome import Outcome
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.trust.intoto import Statement, Subject, dumps_json
from dflash_guard.trust.policy import Signers, is_builtin
from dflash_guard.trust.signing import (
    KEY_SIG_SUFFIX,
    SIGSTORE_SUFFIX,
    SignatureCheck,
    sign_keyless,
    sign_with_key,
    verify_dsse_bundle,
    verify_key_signature,
)

if TYPE_CHECKING:
    from sigstore.oidc import IdentityToken

    from dflash_guard.pins.lockfile import Lockfile
    from dflash_guard.trust.policy import Policy

# v2: every predicate key in snake_case and the verdict as `"passed": true` (v1 mixed
# camelCase keys and `"decision": "approved"`).
PREDICATE_TYPE = "https://github.com/dflash-guard/dflash-guard/approval/v2"
APPROVAL_MAX_BYTES = 256 * 1024 * 1024  # one subject per locked file: large for a huge lock


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One step of the gate: its name, whether it passed, and a one-line detail (`skipped`: a
    step the policy does not configure, e.g. the endpoint diff without `difftest.endpoints`)."""

    name: str
    ok: bool
    detail: str
    skipped: bool = False

    @classmethod
    def of(cls, name: str, outcome: Outcome) -> CheckResult:
        """The row for a check named `name` that ended with `outcome`."""
        return cls(name, outcome.ok, outcome.reason, outcome.is_skipped)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.ok, "detail": self.detail,
                "skipped": self.skipped}


def _engine_descriptor(engine: Any) -> dict[str, Any]:
    descriptor: dict[str, Any] = {
        "name": engine.name,
        "uri": f"git+{engine.url}@{engine.commit}",
        "digest": {"gitCommit": engine.commit},
    }
    if engine.ref:
        descriptor["annotations"] = {"ref": engine.ref}
    return descriptor


def approval_statement(
    lock_path: Path,
    lock: Lockfile,
    policy: Policy,
    *,
    checks: Sequence[CheckResult],
    scan_summary: Mapping[str, Any],
    difftest: Mapping[str, Any],
    acceptance_length: float,
    tiers: Mapping[str, str],
    digests: Mapping[str, str],
    waivers_used: Sequence[str] = (),
    endpoint_diff: Mapping[str, Any] | None = None,
    advisories: Mapping[str, Any] | None = None,
    rollout: Mapping[str, Any] | None = None,
    time: dt.datetime | None = None,
) -> dict[str, Any]:
    """The approval record as an in-toto Statement v1 (a dict ready for JSON); `endpoint_diff`
    is the live-engine diff's summary and `advisories` the audit's feeds (with digests) and
    matched ids, each None (`null`) when the policy configures none.

    `digests` (`ROLE/PATH` -> sha256) are the digests the gate computed from the bytes on disk
    in this run, never the lock's: a subject names what was actually checked. A locked file
    without one is an error (it was not checked)."""
    subjects = [Subject(lock_path.name, {"sha256": sha256_file(lock_path)})]
    for artifact in lock.artifacts:
        for locked in sorted(artifact.files, key=lambda f: f.path):
            name = f"{artifact.role}/{locked.path}"
            if name not in digests:
                raise InputError(f"approval record: {name} was not hashed in this run")
            subjects.append(Subject(name, {"sha256": digests[name]}))
    when = (time or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
    predicate = {
        "passed": True,
        "approved_at": when.isoformat().replace("+00:00", "Z"),
        "tool": {"name": "dflash-guard", "version": __version__},
        "policy": {
            "name": policy.name,
            # `builtin:strict` for a shipped policy, else the file's name: a file can never pass
            # for a built-in one (its digest differs too).
            "uri": (f"builtin:{Path(policy.source).stem}" if is_builtin(policy)
                    else Path(policy.source).name),
            "digest": {"sha256": policy.digest.removeprefix("sha256:")},
        },
        "lockfile": {"name": lock_path.name, "content_digest": lock.digest()},
        "artifacts": [
            {
                "role": a.role,
                "source": a.source,
                "provenance": a.provenance,
                "repo": a.repo,
                "commit": a.commit,
                "name": getattr(a, "name", None),
                "tier": tiers.get(a.role),
                "files": len(a.files),
            }
            for a in lock.artifacts
        ],
        "engines": [_engine_descriptor(e) for e in lock.engines],
        "checks": [c.to_json() for c in checks],
        "scan": dict(scan_summary),
        "difftest": dict(difftest),
        "acceptance_length": acceptance_length,
        "endpoint_diff": dict(endpoint_diff) if endpoint_diff is not None else None,
        "waivers": list(waivers_used),
        "advisories": dict(advisories) if advisories is not None else None,
        # the concurrency benchmark's numbers, only under a policy with a `rollout` section
        **({"rollout": dict(rollout)} if rollout is not None else {}),
    }
    return Statement(tuple(subjects), PREDICATE_TYPE, predicate).to_json()


def dumps_statement(statement: Mapping[str, Any]) -> bytes:
    """Stable JSON bytes for a statement (what is written, and what a signature covers)."""
    return dumps_json(statement)


def write_approval(statement: Mapping[str, Any], out: Path) -> None:
    """Write the approval record atomically (whole or not at all)."""
    try:
        write_atomic(out, dumps_statement(statement))
    except OSError as error:
        raise InputError(f"cannot write approval record {out}: {error}") from None


def sign_approval(out: Path, *, key: Path | None = None, token: IdentityToken | None = None,
                  interactive: bool = False) -> Path:
    """Sign a written approval record: with `key` (`OUT.sig`), else Sigstore DSSE over it
    (`OUT.sigstore.json`; `token` from `signing.identity_token`)."""
    if key is not None:
        return sign_with_key(out, key)
    return sign_keyless(out, token=token, interactive=interactive, statement=out.read_bytes())


def read_approval(path: Path) -> dict[str, Any]:
    """Read an approval record and check it is an in-toto Statement v1 from dflash-guard."""
    text = read_input_text(path, "approval record", APPROVAL_MAX_BYTES)
    try:
        return Statement.loads(text, PREDICATE_TYPE, "a dflash-guard approval").to_json()
    except ValueError as error:
        raise InputError(f"{path}: {error}") from None


def verify_approval(path: Path, signers: Signers, *, trust_root: Path | None = None
                    ) -> list[SignatureCheck]:
    """Check every signature next to an approval record against the policy's approval signers.

    `RECORD.sig` (key) is checked with `model_signing`; `RECORD.sigstore.json` must be a DSSE
    bundle whose statement is byte for byte the record. No signature at all is a refusal.
    """
    keyed = path.with_name(path.name + KEY_SIG_SUFFIX)
    bundle = path.with_name(path.name + SIGSTORE_SUFFIX)
    checks = []
    if keyed.exists() or keyed.is_symlink():
        checks.append(verify_key_signature(path, keyed, signers.public_keys, subject=path.name))
    if bundle.exists() or bundle.is_symlink():
        data = read_input(path, "approval record", APPROVAL_MAX_BYTES)
        checks.append(verify_dsse_bundle(data, bundle, signers.identities,
                                         trust_root=trust_root, subject=path.name))
    if not checks:
        checks.append(SignatureCheck.bad(path.name, str(bundle), "not signed"))
    return checks


@dataclasses.dataclass(frozen=True)
class ApprovalVerdict:
    """`verify-approval`: the record's signatures, and its subjects checked against disk."""

    record: str
    policy: str
    signatures: tuple[SignatureCheck, ...]
    problems: tuple[str, ...]  # subjects that differ from (or are missing on) disk
    checked: int  # subjects hashed and equal
    acceptance_length: float | None

    @property
    def passed(self) -> bool:
        return (bool(self.signatures) and all(c.ok for c in self.signatures)
                and not self.problems)

    def to_json(self) -> dict[str, Any]:
        return {"record": self.record, "policy": self.policy, "passed": self.passed,
                "signatures": [c.to_json() for c in self.signatures],
                "problems": list(self.problems), "subjects_checked": self.checked,
                "acceptance_length": self.acceptance_length}


def check_approval(path: Path, policy: Policy, *, roots: Mapping[str, Path] | None = None,
                   lock_path: Path | None = None, trust_root: Path | None = None
                   ) -> ApprovalVerdict:
    """Verify an approval record: its signature against the policy's approval signers and,
    unless `roots` is None (the signature only, as `monitor --record` needs), every subject
    against the bytes on disk: `ROLE/PATH` under `roots[ROLE]`, the lockfile at `lock_path`.
    A subject whose file was not given is a problem (it was not checked)."""
    statement = read_approval(path)
    signatures = tuple(verify_approval(path, policy.approval_signers, trust_root=trust_root))
    problems, checked = [], 0
    for subject in statement["subject"] if roots is not None else ():
        name, digest = subject["name"], subject["digest"].get("sha256")
        role, _, rel = name.partition("/")
        file = (lock_path if not rel
                else roots[role] / rel if roots is not None and role in roots else None)
        if file is None:
            flag = "--lock LOCKFILE" if not rel else f"--root {role}=DIR"
            problems.append(f"{name}: not checked (pass {flag})")
            continue
        if not file.is_file():
            problems.append(f"{name}: missing on disk ({file})")
        elif sha256_file(file) != digest:
            problems.append(f"{name}: differs from the approved bytes")
        else:
            checked += 1
    tau = statement["predicate"].get("acceptance_length")
    return ApprovalVerdict(str(path), policy.name, signatures, tuple(problems), checked,
                           float(tau) if isinstance(tau, int | float) and
                           not isinstance(tau, bool) else None)
