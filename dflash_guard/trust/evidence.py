"""What counts as evidence: the policy's judgements on claims made in files an attacker can edit.

A lockfile's `provenance: hub-confirmed`, an engine's `#ref` label and a GGUF comparison record's
`"passed": true` are all text anyone can write (a lockfile's digest is no MAC). Each counts only
with evidence the tool checks itself:
- Hub provenance counts when the lockfile's signature verifies against a policy signer
  (`provenance_trusted`); otherwise every Hub artifact is trusted as a local folder, and neither
  its organisation's tier nor a staging approval keyed on its `repo@commit` applies.
- `lock --confirmed-by LOCK` confirms only from a lock whose signature verifies
  (`load_confirming_lock`), and only a snapshot with exactly its files (`pins.resolve`).
- An engine's identity and release come from evidence the policy trusts (`trust/engines.py`):
  its release map, or a tag signed by a key it lists; a clone's refs and the label never count.
- A GGUF comparison record counts when signed by a policy approval signer, when its subjects
  are exactly the locked target's files and locked GGUFs, its prompt set is the policy's, and it was
  held to the policy's own standard (every prompt, the token budget, a tolerance no wider than
  the policy's or the one measured for the GGUF's precision, near-ties within the allowance:
  `standard_problem`); it counts for the locked `.gguf` files it names by digest only
  (`comparison_records`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input
from dflash_guard.outcome import Outcome
from dflash_guard.pins.lockfile import Artifact, Lockfile, load_lockfile
from dflash_guard.schema import MAX_DOCUMENT_CHARS
from dflash_guard.trust.comparison import (
    GGUF_PREFIX,
    TARGET_PREFIX,
    accepts,
    covered_gguf,
    read_comparison,
)
from dflash_guard.trust.policy import Policy, Signers
from dflash_guard.trust.signing import (
    SignatureCheck,
    verify_file_signatures,
    verify_lockfile_signature,
)


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


# --- GGUF comparison records -----------------------------------------------------------------


def prompt_set_path(policy: Policy) -> Path:
    """The prompt set the policy names (its file, or the built-in set)."""
    from kernels_ref.prompts import DEFAULT_PROMPTS

    return Path(policy.difftest.prompts) if policy.difftest.prompts else Path(DEFAULT_PROMPTS)


def prompt_set_digest(policy: Policy) -> str:
    """The sha256 of the prompt set the policy names."""
    data = read_input(prompt_set_path(policy), "prompt set", MAX_DOCUMENT_CHARS)
    return hashlib.sha256(data).hexdigest()


def _number(value: object) -> float | None:
    """A finite JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


# A logprob tolerance and where it comes from (None: none can be named, and why). The gate
# measures it for each locked `.gguf` from the GGUF's precision (`gate.checks`): trust stands
# below the diff tests and does not import them.
Tolerance = tuple[float | None, str]
UNREAD: Tolerance = (None, "the GGUF's precision was not read (no verified gguf folder), and the "
                           "policy sets no difftest.max_logprob_delta")


def record_tolerance(policy: Policy, tolerances: Mapping[str, Tolerance], gguf: str
                     ) -> Tolerance:
    """The widest logprob tolerance the policy accepts for the locked GGUF of sha256 `gguf`: its
    `max_logprob_delta`, else the one measured for the GGUF's precision (`tolerances`)."""
    if policy.difftest.max_logprob_delta is not None:
        return policy.difftest.max_logprob_delta, "the policy's difftest.max_logprob_delta"
    return tolerances.get(gguf, UNREAD)


def standard_problem(predicate: Mapping[str, Any], policy: Policy, accepted: Tolerance
                     ) -> str | None:
    """Why a record was held to less than the policy asks (None: it meets it): every prompt of
    the policy's set, its token budget, its logprob tolerance (or the measured one for the
    GGUF's precision), no hard divergence, and near-ties only within the policy's allowance."""
    from kernels_ref.prompts import PromptSetError, read_prompt_set

    prompts, tokens = predicate.get("prompts"), predicate.get("max_new_tokens")
    try:
        wanted = len(read_prompt_set(prompt_set_path(policy)))
    except PromptSetError as error:
        raise InputError(str(error)) from None
    if isinstance(prompts, bool) or not isinstance(prompts, int) or prompts < wanted:
        return f"it compared {prompts!r} prompts of the policy's {wanted}"
    if isinstance(tokens, bool) or not isinstance(tokens, int) or (
            tokens < policy.difftest.max_new_tokens):
        return (f"it compared {tokens!r} new tokens per prompt; the policy's "
                f"difftest.max_new_tokens is {policy.difftest.max_new_tokens}")
    if predicate.get("hard") != 0:
        return f"it records {predicate.get('hard')!r} hard divergences"
    logprobs = predicate.get("logprobs")
    tolerance = _number(logprobs.get("tolerance")) if isinstance(logprobs, dict) else None
    worst = _number(logprobs.get("max_delta")) if isinstance(logprobs, dict) else None
    limit, limit_from = accepted
    if limit is None:
        return f"its logprob tolerance cannot be judged: {limit_from}"
    if tolerance is None or worst is None or worst > tolerance or tolerance > limit:
        given = logprobs if isinstance(logprobs, dict) else {}
        return (f"its logprob tolerance {given.get('tolerance')!r} (largest difference "
                f"{given.get('max_delta')!r}) is wider than the policy accepts ({limit:g}, "
                f"{limit_from})")
    ties, margin = predicate.get("near_ties"), _number(predicate.get("near_tie_margin"))
    if isinstance(ties, bool) or not isinstance(ties, int) or ties < 0:
        return f"its near-tie count {ties!r} is not a count"
    if ties:
        endpoints = policy.difftest.endpoints
        allowed = endpoints.max_near_ties if endpoints is not None else ties
        allowance = policy.difftest.near_tie_allowance
        if margin is None or margin > allowance:
            return (f"it excused {ties} near-ties within {margin!r} nats; the policy's "
                    f"difftest.near_tie_allowance is {allowance:g}")
        if ties > allowed:
            return (f"it excused {ties} near-ties; the policy's difftest.endpoints."
                    f"max_near_ties is {allowed}")
    return None


def accepts_record(path: Path, policy: Policy, lock: Lockfile, *,
                   trust_root: Path | None = None,
                   tolerances: Mapping[str, Tolerance] | None = None) -> Outcome:
    """Whether one comparison record is evidence under `policy` (for the locked `.gguf` files
    `covered_gguf` names; `tolerances`: the one measured for each locked `.gguf`'s precision)."""
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
    prompt_set = statement.predicate.get("prompt_set")
    digest = prompt_set.get("digest") if isinstance(prompt_set, dict) else None
    if not isinstance(digest, dict) or digest.get("sha256") != prompt_set_digest(policy):
        return Outcome.refused("its prompt set is not the one the policy names "
                               "(difftest.prompts)")
    covered = covered_gguf(statement, lock)
    gguf = lock.artifact("gguf")
    compared = gguf.file(covered[0]) if gguf is not None else None
    tolerance = record_tolerance(policy, tolerances or {}, compared.sha256 if compared else "")
    if (problem := standard_problem(statement.predicate, policy, tolerance)) is not None:
        return Outcome.refused(f"held to less than the policy: {problem}")
    return outcome


def comparison_records(policy: Policy, lock: Lockfile, *, trust_root: Path | None = None,
                       tolerances: Mapping[str, Tolerance] | None = None
                       ) -> tuple[dict[str, str], list[str]]:
    """The locked `.gguf` files the policy's accepted comparison records cover (path -> the
    record's name), and why the other records are not evidence."""
    covered: dict[str, str] = {}
    why_not = []
    for path in policy.gguf_comparison_records:
        outcome = accepts_record(path, policy, lock, trust_root=trust_root,
                                 tolerances=tolerances)
        if outcome.ok:
            files = covered_gguf(read_comparison(path), lock)
            covered.update(dict.fromkeys(files, path.name))
        else:
            why_not.append(f"record {path.name}: {outcome.reason}")
    return covered, why_not


def served_gguf_problems(policy: Policy, lock: Lockfile, folder: Path, *,
                         trust_root: Path | None = None,
                         tolerances: Mapping[str, Tolerance] | None = None) -> list[str]:
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
            outcome = accepts_record(path, policy, view, trust_root=trust_root,
                                     tolerances=tolerances)
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
