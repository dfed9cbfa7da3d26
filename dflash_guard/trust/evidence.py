"""What counts as evidence: the policy's judgements on claims made in files an attacker can edit.

A lockfile's `provenance: hub-confirmed`, an engine's `#ref` label and a GGUF comparison record's
`"passed": true` are all text anyone can write (a lockfile's digest is no MAC). Each counts only
with evidence the tool checks itself:
- Hub provenance counts when the lockfile's signature verifies against a policy signer
  (`provenance_trusted`); otherwise every Hub artifact is trusted as a local folder, and neither
  its organisation's tier nor a staging approval keyed on its `repo@commit` applies.
- `lock --confirmed-by LOCK` confirms only from a lock whose signature verifies
  (`load_confirming_lock`), and only a snapshot with exactly its files (`pins.resolve`).
- An engine's release or PR-head status comes from git (`engine_build`): a clone given with
  `--engine-repo` says whether a release tag points at the commit and whether the default branch
  reaches it. Without a clone, only the label's shape is known: a label that is not a release
  tag or a mainline branch counts as a PR head, and no label proves a release.
- A GGUF comparison record counts when signed by a policy approval signer and when its subjects
  are exactly the locked target's files and the GGUF, its prompt set is the policy's and it
  compared at least one prompt (`comparison_records`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path, PurePosixPath

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input
from dflash_guard.outcome import Outcome
from dflash_guard.pins.lockfile import Artifact, Engine, Lockfile, load_lockfile
from dflash_guard.schema import MAX_DOCUMENT_CHARS
from dflash_guard.trust.comparison import GGUF_PREFIX, TARGET_PREFIX, accepts, read_comparison
from dflash_guard.trust.gitclone import GitClone
from dflash_guard.trust.policy import Policy, Signers
from dflash_guard.trust.signing import (
    SignatureCheck,
    verify_file_signatures,
    verify_lockfile_signature,
)

PR_HEAD_RE = re.compile(r"(^|/)(pull|pulls|merge-requests)/\d+(/|$)|^(pr|#)[-/#]?\d+$",
                        re.IGNORECASE)
# Semantic-version tags, and llama.cpp's build tags (`b4567`).
RELEASE_RE = re.compile(r"^(refs/tags/)?(v?\d+(\.\d+)+([.\-+]?[0-9A-Za-z.]+)?|b\d+)$")
MAINLINE_RE = re.compile(r"^(refs/heads/)?(main|master)$")


def artifact_key(artifact: Artifact) -> str:
    """How waivers and records name an artifact: its Hub repo, or `local:NAME`."""
    return artifact.repo if artifact.source == "hub" and artifact.repo else f"local:{artifact.name}"


# --- lockfile provenance ---------------------------------------------------------------------


def signed_by_policy(checks: list[SignatureCheck]) -> bool:
    """Whether signature checks prove a policy signer signed: one verified, none failed."""
    return bool(checks) and all(c.verified for c in checks)


def provenance_note(lock: Lockfile, trusted: bool) -> str:
    """What the gate says of the lock's `hub-confirmed` claims when they do not count."""
    claimed = [a.role for a in lock.artifacts if a.hub_confirmed]
    if trusted or not claimed:
        return ""
    return (f"; {', '.join(claimed)}: hub-confirmed not trusted (the lockfile is not signed by a "
            "policy signer), tiered as local folders")


def load_confirming_lock(path: Path, signers: Signers, *, trust_root: Path | None = None
                         ) -> Lockfile:
    """The lock given with `--confirmed-by`, only when its signature verifies against
    `signers` (the policy's lockfile signers); else an `InputError` saying why."""
    if signers.empty:
        raise InputError(f"--confirmed-by {path}: the policy names no lockfile signer, so no lock "
                         "can confirm anything (pass --policy naming signatures.lockfile)")
    checks = verify_lockfile_signature(path, signers, required=True, trust_root=trust_root)
    if not signed_by_policy(checks):
        reasons = "; ".join(c.reason for c in checks if not c.ok)
        raise InputError(f"--confirmed-by {path}: its signature does not verify against the "
                         f"policy's lockfile signers ({reasons})")
    return load_lockfile(path)


# --- engine builds ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EngineBuild:
    """What is known of a locked engine commit: a release, a PR head, and how it was decided."""

    release: bool
    pr_head: bool
    how: str


def engine_build(engine: Engine, clone: Path | None) -> EngineBuild:
    """The engine's status: from the clone's tags and default branch when given, else from the
    label's shape (which proves no release)."""
    ref = engine.ref or ""
    if clone is None:
        pr_head = bool(ref) and (PR_HEAD_RE.search(ref) is not None
                                 or not (RELEASE_RE.match(ref) or MAINLINE_RE.match(ref)))
        return EngineBuild(False, pr_head, f"label {ref or 'none'!r}, unverified (pass "
                                            f"--engine-repo {engine.name}=CLONE)")
    repo = GitClone(clone)
    if not repo.has(engine.commit):
        raise InputError(f"--engine-repo {engine.name}: commit {engine.commit[:12]} is not in "
                         f"the clone {clone}")
    tags = [t for t in repo.tags_at(engine.commit) if RELEASE_RE.match(t)]
    if tags:
        return EngineBuild(True, False, f"release tag {tags[0]} in {clone}")
    mainline = repo.on_default_branch(engine.commit)
    return EngineBuild(False, not mainline,
                       f"no release tag at the commit; {'on' if mainline else 'not on'} the "
                       f"default branch of {clone}")


# --- GGUF comparison records -----------------------------------------------------------------


def prompt_set_digest(policy: Policy) -> str:
    """The sha256 of the prompt set the policy names (its file, or the built-in set)."""
    from kernels_ref.prompts import DEFAULT_PROMPTS

    path = Path(policy.difftest.prompts) if policy.difftest.prompts else Path(DEFAULT_PROMPTS)
    return hashlib.sha256(read_input(path, "prompt set", MAX_DOCUMENT_CHARS)).hexdigest()


def accepts_record(path: Path, policy: Policy, lock: Lockfile, *,
                   trust_root: Path | None = None) -> Outcome:
    """Whether one comparison record is evidence for the lock's GGUF under `policy`."""
    checks = verify_file_signatures(path, policy.approval_signers, trust_root=trust_root)
    if not signed_by_policy(checks):
        why = "; ".join(c.reason for c in checks if not c.ok) or "not signed"
        return Outcome.refused(f"not signed by a policy approval signer ({why})")
    statement = read_comparison(path)
    outcome = accepts(statement, lock)
    if not outcome.ok:
        return outcome
    target = lock.artifact("target")
    assert target is not None  # `accepts` checked it
    subjects = {s.name.removeprefix(TARGET_PREFIX) for s in statement.subjects
                if s.name.startswith(TARGET_PREFIX)}
    locked = {f.path for f in target.files}  # hidden ones too: the lock's whole set
    if missing := sorted(locked - subjects):
        return Outcome.refused(f"it does not cover the locked target file(s) "
                               f"{', '.join(missing[:3])}")
    prompts = statement.predicate.get("prompts")
    if isinstance(prompts, bool) or not isinstance(prompts, int) or prompts < 1:
        return Outcome.refused(f"it compared {prompts!r} prompts: nothing was tested")
    prompt_set = statement.predicate.get("prompt_set")
    digest = (prompt_set.get("digest") or {}).get("sha256") if isinstance(prompt_set, dict) \
        else None
    if digest != prompt_set_digest(policy):
        return Outcome.refused("its prompt set is not the one the policy names "
                               "(difftest.prompts)")
    return outcome


def comparison_records(policy: Policy, lock: Lockfile, *, trust_root: Path | None = None
                       ) -> tuple[list[str], list[str]]:
    """The policy's GGUF comparison records that are evidence for the lock's GGUF, and why the
    others are not."""
    accepted, why_not = [], []
    for path in policy.gguf_comparison_records:
        outcome = accepts_record(path, policy, lock, trust_root=trust_root)
        if outcome.ok:
            accepted.append(path.name)
        else:
            why_not.append(f"record {path.name}: {outcome.reason}")
    return accepted, why_not


def served_gguf_problems(policy: Policy, lock: Lockfile, folder: Path, *,
                         trust_root: Path | None = None) -> list[str]:
    """Why a GGUF of the target folder, which `launch llama.cpp` serves as `--model`, is not
    covered by an accepted comparison record: each such GGUF and every split part llama.cpp
    loads with it (`pins.fileset.llamacpp_files`) must be a GGUF subject of one record that
    `accepts_record` accepts for exactly those files."""
    from dflash_guard.pins.fileset import SPLIT_RE, FileSetError, llamacpp_files

    target = lock.artifact("target")
    if target is None:
        return []
    problems = []
    for first in (f.path for f in target.files if f.path.endswith(".gguf")):
        found = SPLIT_RE.search(first)
        if found is not None and int(found.group(1)) != 1:
            continue  # a later split part: loaded through the first one
        try:
            parts = llamacpp_files(folder / first).weights
        except FileSetError as error:
            problems.append(f"target/{first}: {error}")
            continue
        names = [str(PurePosixPath(first).with_name(part)) for part in parts]
        locked = [target.file(name) for name in names]
        if any(f is None for f in locked):
            missing = [n for n, f in zip(names, locked, strict=True) if f is None]
            problems.append(f"target/{first}: llama.cpp also loads {', '.join(missing)}, which "
                            "the lock does not cover")
            continue
        served = tuple(f for f in locked if f is not None)
        view = dataclasses.replace(lock, artifacts=(
            target, dataclasses.replace(target, role="gguf", files=served)))
        digests = {f.sha256 for f in served}
        why_not = []
        for path in policy.gguf_comparison_records:
            outcome = accepts_record(path, policy, view, trust_root=trust_root)
            named = {s.digest.get("sha256") for s in read_comparison(path).subjects
                     if s.name.startswith(GGUF_PREFIX)} if outcome.ok else set()
            if outcome.ok and digests <= named:
                break
            why_not.append(f"record {path.name}: " + (outcome.reason if not outcome.ok else
                           "it does not name every split part"))
        else:
            because = f" ({'; '.join(why_not)})" if why_not else ""
            problems.append(f"target/{first}: llama.cpp serves it as --model, and no accepted "
                            f"comparison record covers it{because}")
    return problems
