"""The gate's run: prechecks before any work, every check in order, the record on approval."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard.errors import Error, InputError
from dflash_guard.fileio import read_input
from dflash_guard.gate.checks import CHECKS, STEPS
from dflash_guard.gate.endpoints import engines_from_policy, resolve_api_key, resolve_endpoints
from dflash_guard.gate.evidence import JSON
from dflash_guard.gate.inputs import GateInputs, GateOptions, LockRead
from dflash_guard.gate.record import CheckRow, approval_statement
from dflash_guard.outcome import Outcome
from dflash_guard.outputs import refuse_outputs_over_inputs, refuse_unwritable
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.pins.roles import refuse_swapped_roles
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from dflash_guard.schema import MAX_DOCUMENT_CHARS
from dflash_guard.trust.closure import PolicyClosure, closure_changes, policy_closure, summary
from dflash_guard.trust.policy import Policy, load_policy
from dflash_guard.trust.provenance import sign_approval, write_approval
from dflash_guard.trust.signing import (
    KEY_SIG_SUFFIX,
    SIGSTORE_SUFFIX,
    check_ec_private_key,
    identity_token,
    lock_signature_paths,
)

if TYPE_CHECKING:
    from sigstore.oidc import IdentityToken


@dataclasses.dataclass(frozen=True)
class GateResult:
    """The decision, every check that ran (in order), and the approval record if approved."""

    approved: bool
    checks: tuple[CheckRow, ...]
    reason: str | None = None
    record: Path | None = None
    signature: Path | None = None
    statement: Mapping[str, object] | None = None

    @property
    def passed(self) -> bool:
        """Approved (exit 0); refused is exit 1."""
        return self.approved

    @property
    def not_run(self) -> list[str]:
        """The checks a refusal stopped before (in order)."""
        return [s for s in STEPS if s not in {c.name for c in self.checks}]

    def to_json(self) -> JSON:
        return {
            "passed": self.passed,
            "reason": self.reason,
            "checks": [c.to_json() for c in self.checks],
            "not_run": self.not_run,
            "record": str(self.record) if self.record else None,
            "signature": str(self.signature) if self.signature else None,
            "signed": self.signature is not None,
        }


def _check_signing(options: GateOptions) -> None:
    signing = options.signing
    if signing.sigstore and signing.key is not None:
        raise InputError("--sign and --key are exclusive: sign with Sigstore or with a key")
    if signing.key is not None and not signing.key.is_file():
        raise InputError(f"--key {signing.key}: no such file")
    if signing.key is not None:  # a key that cannot sign fails now, not after every check
        check_ec_private_key(signing.key, signing.passphrase)
    if signing.wanted and options.out is None:
        raise InputError("signing the approval needs -o/--output FILE")


def _check_outputs(options: GateOptions, policy: Policy) -> None:
    """The approval record and its signature can be written, and replace nothing the gate
    reads: both known before the first check runs."""
    if options.out is None:
        return
    out = Path(options.out)
    suffix = KEY_SIG_SUFFIX if options.signing.key is not None else SIGSTORE_SUFFIX
    outputs = [("--output", out)]
    if options.signing.wanted:
        outputs.append(("signature", out.with_name(out.name + suffix)))
    lock_path = Path(options.lock_path)
    inputs = [("--lock", lock_path), *policy.files(),
              ("--key", options.signing.key), ("--trust-root", options.trust_root),
              ("--bundle", options.lock_bundle),
              *((f"--engine-repo {name}", path) for name, path in options.engine_repos.items()),
              *(("lockfile signature", p) for p in lock_signature_paths(lock_path)),
              *((f"--root {role}", folder) for role, folder in options.roots.items())]
    refuse_outputs_over_inputs(outputs, inputs)
    refuse_unwritable(outputs)


def run_gate(options: GateOptions, progress: Progress = NO_PROGRESS) -> GateResult:
    """Run every check in order; refuse at the first failure; write `options.out` only on
    approval (signed as `options.signing` says). Every usage and input error that can be known
    without running a check is raised first. The checks are stages of `progress`, each holding
    the stages of its own work (hashing, scanning, decoding, requests)."""
    _check_signing(options)
    for role, folder in options.roots.items():
        if not Path(folder).is_dir():
            raise InputError(f"--root {role}={folder}: no such folder")
    refuse_swapped_roles(options.roots, "--root {role}=")
    loaded = load_policy(options.policy)
    policy = loaded.accepting(options.signers)
    _check_outputs(options, policy)
    endpoints = resolve_endpoints(policy, options.endpoints)
    api_key = resolve_api_key(policy, options.endpoints)
    # Ask for the Sigstore credential before any work, so a missing one fails at once.
    token = identity_token(options.signing.interactive) if options.signing.sigstore else None
    closure = policy_closure(loaded)  # the policy's own files, hashed before any check
    with tempfile.TemporaryDirectory(prefix="dflash-guard-gate-") as private:
        lock_read = read_lock_once(Path(options.lock_path), Path(private))
        inputs = GateInputs(
            options, policy, options.today or dt.datetime.now(dt.UTC).date(), lock_read,
            endpoints, engines_from_policy(endpoints, api_key, options.endpoints.api_key_env)
            if endpoints is not None else None, progress=progress)
        return _run_checks(inputs, loaded, closure, token)


def read_lock_once(lock_path: Path, private: Path) -> LockRead:
    """Read the lockfile and its signatures once, into `private` (a folder of our own): the
    bytes every check judges, and the record names."""
    data = read_input(lock_path, "lockfile", MAX_DOCUMENT_CHARS)
    copy = private / lock_path.name
    copy.write_bytes(data)
    for signature in lock_signature_paths(lock_path):
        if signature.is_symlink():  # kept a link: the signature check refuses it as before
            (private / signature.name).symlink_to(os.readlink(signature))
        elif signature.exists():
            read = read_input(signature, "lockfile signature")
            (private / signature.name).write_bytes(read)
    return LockRead(lock_path, data, hashlib.sha256(data).hexdigest(), copy)


def _changed_during_run(inputs: GateInputs, loaded: Policy, closure: PolicyClosure) -> list[str]:
    """What the gate read at the start that is no longer the same on disk: the policy's files
    (what the checks read from them may not be what the record names) and the lockfile."""
    problems = closure_changes(closure, loaded)
    lock = inputs.lock_read
    try:
        now = sha256_file(lock.path)
    except OSError as error:
        now = f"unreadable ({error})"
    if now != lock.sha256:
        problems.append(f"--lock {lock.path}: other bytes than the ones judged")
    return problems


def _run_checks(inputs: GateInputs, loaded: Policy, closure: PolicyClosure,
                token: IdentityToken | None) -> GateResult:
    options, progress, policy = inputs.options, inputs.progress, inputs.policy
    rows: list[CheckRow] = []
    with stage(progress, "gate", len(CHECKS), "checks"):
        for check in CHECKS:
            with stage(progress, check.name):
                try:
                    outcome, evidence = check.run(inputs)
                except Error as error:
                    if not rows:  # the first check reads the lockfile: a usage error, exit 2
                        raise
                    # once checks have run, an input that cannot be read (truncated weights,
                    # an endpoint that never answers) refuses the deploy, with the table
                    outcome, evidence = Outcome.refused(f"could not check: {error}"), None
            progress.advanced()
            rows.append(CheckRow(check.name, outcome, evidence))
            if not outcome.ok:
                return GateResult(False, tuple(rows), reason=f"{check.name}: {outcome.reason}")
            if evidence is not None:
                inputs = dataclasses.replace(inputs, found=(*inputs.found, evidence))
    changed = _changed_during_run(inputs, loaded, closure)
    if changed:
        return GateResult(False, tuple(rows), reason="evidence: changed during the run: "
                          f"{summary(changed)} (the record must name the bytes the checks read)")
    statement = approval_statement(inputs.lock_read, inputs.lock, policy, closure, rows)
    signature = None
    out = options.out
    if out is not None:
        write_approval(statement, out)
        if options.signing.wanted:
            signature = sign_approval(out, key=options.signing.key, token=token,
                                      interactive=options.signing.interactive,
                                      passphrase=options.signing.passphrase)
    return GateResult(True, tuple(rows), record=out, signature=signature, statement=statement)
