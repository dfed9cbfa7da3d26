"""The approval record, read, signed and verified (the gate writes it: `gate.record`).

A record is an in-toto Statement v1 (`approval/v3`): its subjects are
the lockfile and every locked file with the sha256 the gate computed from the disk, its
predicate names the policy by digest and carries the checks' rows and evidence. It is written
atomically and signed as a DSSE attestation whose payload is the record itself, with Sigstore
(`RECORD.sigstore.json`) or an ECDSA key (`RECORD.sig`). `check_approval` is `verify-approval`:
the record must be about the policy it is checked under, signed by that policy's approval
signers, and the disk must be the approved set exactly, listed with the same walk as `verify`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflash_guard.errors import InputError
from dflash_guard.fileio import loads_json, read_input, write_atomic
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.schema import MAX_DOCUMENT_CHARS
from dflash_guard.trust.attestation import Passphrase
from dflash_guard.trust.closure import PolicyClosure, canonical_digest, policy_closure, summary
from dflash_guard.trust.intoto import Statement, dumps_json
from dflash_guard.trust.policy import Signers
from dflash_guard.trust.record_schema import record_problem
from dflash_guard.trust.signing import (
    KEY_SIG_SUFFIX,
    SIGSTORE_SUFFIX,
    SignatureCheck,
    sign_keyless,
    sign_with_key,
    verify_bundle,
    verify_dsse_bundle,
    verify_key_signature,
)

if TYPE_CHECKING:
    from sigstore.oidc import IdentityToken

    from dflash_guard.trust.policy import Policy

# v3: the checks' rows say `"verdict": "passed" | "refused" | "skipped"` and their evidence sits
# under `evidence`, one section per check that passed. No earlier version was released.
PREDICATE_TYPE = "https://github.com/dflash-guard/dflash-guard/approval/v3"
APPROVAL_MAX_BYTES = 256 * 1024 * 1024  # one subject per locked file: large for a huge lock


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
                  interactive: bool = False, passphrase: Passphrase | None = None) -> Path:
    """Sign a written approval record as a DSSE attestation whose payload is the record itself:
    with `key` (`OUT.sig`, `passphrase()` asked when the key is encrypted), else with Sigstore
    (`OUT.sigstore.json`; `token` from `signing.identity_token`)."""
    if key is not None:
        return sign_with_key(out, key, passphrase=passphrase)
    return sign_keyless(out, token=token, interactive=interactive)


def read_approval(path: Path) -> dict[str, Any]:
    """Read an approval record and check it is an in-toto Statement v1 from dflash-guard (v3),
    every field read later of the right type and range (`record_schema`): anything else is one
    `InputError` line naming the field."""
    return parse_approval(read_input(path, "approval record", APPROVAL_MAX_BYTES), path)


def parse_approval(raw: bytes, path: Path) -> dict[str, Any]:
    """`read_approval` of bytes already read (`path` names them in errors)."""
    data = loads_json(raw, f"approval record {path}", finite=True)
    kind = data.get("predicateType") if isinstance(data, dict) else None
    if kind == PREDICATE_TYPE and (problem := record_problem(data)) is not None:
        raise InputError(f"{path}: malformed approval record: {problem}")
    try:
        return Statement.from_json(data, PREDICATE_TYPE, "a dflash-guard approval").to_json()
    except ValueError as error:
        raise InputError(f"{path}: {error}") from None


def acceptance_length(statement: Mapping[str, Any]) -> float | None:
    """The mean acceptance length a record's local diff measured, or None."""
    tau = None
    for row in statement["predicate"].get("checks") or ():  # the difftest row's evidence
        if isinstance(row, dict) and row.get("name") == "difftest":
            evidence = row.get("evidence")
            tau = evidence.get("acceptance_length") if isinstance(evidence, dict) else None
    return float(tau) if isinstance(tau, int | float) and not isinstance(tau, bool) else None


def verify_approval(path: Path, signers: Signers, *, trust_root: Path | None = None,
                    bundle: Path | None = None) -> list[SignatureCheck]:
    """Check every signature next to an approval record against `signers`.

    Each (`RECORD.sig`, key; `RECORD.sigstore.json`, Sigstore; or `bundle`, given by name) must
    be a DSSE attestation whose statement is byte for byte the record (a key signature of an
    earlier release, in the OpenSSF Model Signing format, is checked with `model_signing`).
    None at all is one refusal, "not signed", naming no signature file (there is none to
    name)."""
    if bundle is not None:
        return [verify_bundle(path, bundle, signers, trust_root=trust_root)]
    keyed = path.with_name(path.name + KEY_SIG_SUFFIX)
    sigstore = path.with_name(path.name + SIGSTORE_SUFFIX)
    checks = []
    if keyed.exists() or keyed.is_symlink():
        checks.append(verify_key_signature(path, keyed, signers.public_keys, subject=path.name))
    if sigstore.exists() or sigstore.is_symlink():
        data = read_input(path, "approval record", APPROVAL_MAX_BYTES)
        checks.append(verify_dsse_bundle(data, sigstore, signers.identities,
                                         trust_root=trust_root, subject=path.name))
    if not checks:
        checks.append(SignatureCheck.bad(
            path.name, "", f"not signed: nothing vouches for this record (neither {keyed.name} "
                           f"nor {sigstore.name} exists; sign it with gate --key or --sign)"))
    return checks


def policy_binding(statement: Mapping[str, Any], policy: Policy,
                   accepted: Sequence[str] = (), closure: PolicyClosure | None = None
                   ) -> str | None:
    """Why the record is not about `policy`, or None when it is: its policy digest must be the
    digest of `policy`'s closure (its text and every file it names, hashed now: `closure` when
    the caller took it before adding signers), or one the operator lists in `accepted`
    (`sha256:HEX`). A record that names its policy by text alone (made before closures) binds
    none of the files the policy names: it fails closed."""
    named = statement["predicate"].get("policy")
    digest = named.get("digest", {}).get("sha256") if isinstance(named, dict) else None
    if not isinstance(digest, str):
        return "the record names no policy digest"
    assert isinstance(named, dict)
    recorded = named.get("closure")
    if not isinstance(recorded, dict):
        return ("the record names its policy by its text only, not by the files the policy "
                "names (feeds, keys, prompt sets, comparison records): a record made before "
                "policy closures cannot say what it was judged with; re-approve it with this "
                "version")
    if canonical_digest(recorded) != digest:
        return "the record's policy listing does not match its policy digest"
    mine: PolicyClosure = closure if closure is not None else policy_closure(policy)
    wanted = {mine.digest.removeprefix("sha256:"),
              *(d.removeprefix("sha256:") for d in accepted)}
    if digest in wanted:
        return None
    if recorded.get("text_sha256") == mine.text_sha256:
        return (f"the policy's text is the record's, but what it names is not: "
                f"{summary(mine.differences(recorded))}: another policy; check it under "
                "the policy with those files")
    return (f"approved under policy {named.get('name')!r} ({named.get('uri')}, sha256:"
            f"{digest[:12]}...), not under {policy.name!r} (sha256:"
            f"{mine.digest.removeprefix('sha256:')[:12]}...): check it under that policy, "
            "or list its digest with --accept-policy-digest")


@dataclasses.dataclass(frozen=True)
class ApprovalVerdict:
    """`verify-approval`: the record's policy and signatures, and the disk against it."""

    record: str
    record_policy: Mapping[str, Any]  # the record's own policy descriptor (name, uri, digest)
    policy: str  # the policy it was checked under
    policy_problem: str | None
    signatures: tuple[SignatureCheck, ...]
    problems: tuple[str, ...]  # files missing, extra or changed against the approved set
    checked: int | None  # approved files found equal on disk; None: files not checked
    acceptance_length: float | None
    # role -> the folder its files were verified in (a `--root`, or the HF-cache snapshot)
    locations: Mapping[str, Path] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return (self.policy_problem is None and bool(self.signatures)
                and all(c.ok for c in self.signatures) and not self.problems)

    def to_json(self) -> dict[str, Any]:
        return {"record": self.record, "record_policy": dict(self.record_policy),
                "policy": self.policy, "policy_problem": self.policy_problem,
                "passed": self.passed, "signatures": [c.to_json() for c in self.signatures],
                "problems": list(self.problems), "files_checked": self.checked,
                "acceptance_length": self.acceptance_length}


def check_approval(path: Path, policy: Policy, *, roots: Mapping[str, Path] | None = None,
                   lock_path: Path | None = None, accepted_policies: Sequence[str] = (),
                   trust_root: Path | None = None, bundle: Path | None = None,
                   closure: PolicyClosure | None = None, lock_data: bytes | None = None,
                   progress: Progress = NO_PROGRESS) -> ApprovalVerdict:
    """Verify an approval record: that it is about `policy` (`policy_binding`), its signatures
    against the policy's approval signers and, unless `roots` is None (the
    signature only, as `monitor --record` needs), the disk against it, as `verify` would: the
    lockfile at `lock_path` must be the approved one, and every folder it locks is listed with
    the one walk and compared with the approved set (missing, extra and changed files fail).
    `lock_data`: the lockfile's bytes as the caller read them once (launch plans from the
    same bytes), judged instead of a second read of `lock_path`."""
    with tempfile.TemporaryDirectory(prefix="dflash-guard-record-") as private:
        copy = _read_once(path, Path(private))  # what is parsed is what the signature covers
        statement = parse_approval(copy.read_bytes(), path)
        checks = [_named_as(c, private, path.parent)
                  for c in verify_approval(copy, policy.approval_signers, trust_root=trust_root,
                                           bundle=bundle)]
    problems, checked, locations = (([], None, {}) if roots is None
                                    else _compare_disk(statement, roots, lock_path, progress,
                                                       lock_data))
    named = statement["predicate"].get("policy")
    return ApprovalVerdict(str(path), named if isinstance(named, dict) else {}, policy.name,
                           policy_binding(statement, policy, accepted_policies, closure),
                           tuple(checks), tuple(problems), checked, acceptance_length(statement),
                           locations)


def _named_as(check: SignatureCheck, private: str, folder: Path) -> SignatureCheck:
    """A check made on the private copies, naming the files the user gave."""
    def real(text: str) -> str:
        return text.replace(private, str(folder))

    outcome = dataclasses.replace(check.outcome, reason=real(check.outcome.reason or ""))
    return dataclasses.replace(check, signature=real(check.signature), outcome=outcome)


def _read_once(path: Path, private: Path) -> Path:
    """The record and its signatures, each read once into `private` (a folder of our own)."""
    copy = private / path.name
    copy.write_bytes(read_input(path, "approval record", APPROVAL_MAX_BYTES))
    for suffix in (KEY_SIG_SUFFIX, SIGSTORE_SUFFIX):
        signature = path.with_name(path.name + suffix)
        if signature.is_symlink():  # kept a link: the signature check refuses it as before
            (private / signature.name).symlink_to(os.readlink(signature))
        elif signature.exists():
            (private / signature.name).write_bytes(read_input(signature, "record signature"))
    return copy


def _compare_disk(statement: Mapping[str, Any], roots: Mapping[str, Path],
                  lock_path: Path | None, progress: Progress = NO_PROGRESS,
                  lock_data: bytes | None = None) -> tuple[list[str], int, dict[str, Path]]:
    """The problems of the disk against the record, how many approved files matched, and the
    folder each role was verified in."""
    from dflash_guard.pins.lockfile import lockfile_from_bytes
    from dflash_guard.pins.verify import locked_files, verify_lock

    if lock_path is None:
        raise InputError("checking the files needs the approved lockfile: pass --lock LOCKFILE "
                         "(or --signature-only)")
    approved = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    recorded = statement["predicate"].get("lockfile")  # its shape: `read_approval`
    if recorded is None:
        return ["the record names no lockfile: nothing to compare --lock with"], 0, {}
    data = (read_input(lock_path, "lockfile", MAX_DOCUMENT_CHARS) if lock_data is None
            else lock_data)  # read once: hashed, parsed
    if approved.pop(recorded["name"], None) != hashlib.sha256(data).hexdigest():
        return [f"--lock {lock_path}: not the lockfile the record approved"], 0, {}
    lock = lockfile_from_bytes(data, str(lock_path))
    if lock.digest() != recorded["content_digest"]:
        return [f"--lock {lock_path}: the record approved these bytes, but its checks judged "
                f"another lock ({recorded['content_digest'][:19]}..., this one is "
                f"{lock.digest()[:19]}...)"], 0, {}
    report = verify_lock(lock, dict(roots), use_cache=False,  # the same walk as `verify`
                         progress=progress)
    problems = [p.describe() for p in report.problems]
    for name in sorted(set(locked_files(lock)) - set(approved)):
        problems.append(f"{name}: locked but not covered by the record")
    locked = locked_files(lock)
    checked = 0
    for name, digest in sorted(approved.items()):  # the disk against the lock: `report`
        if name not in locked:
            problems.append(f"{name}: approved but not in the lockfile")
        elif digest != locked[name]:
            problems.append(f"{name}: the record approved other bytes than the lock names")
        elif report.digests.get(name) == digest:
            checked += 1
    return problems, checked, dict(report.locations)
