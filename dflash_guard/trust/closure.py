"""A policy is its closure: its text, the built-in policy it extends, and every file it names.

Two byte-identical policy files beside different advisory feeds, prompt sets, comparison records
or keys are two different policies. `policy_closure` lists each file a policy refers to (after
`extends`: `Policy.files()`, a feed folder expanded to every file in it) with the sha256 of its
bytes, and `PolicyClosure.digest` covers the text, the built-in and that listing: it is the digest
an approval record names its policy by, and the one `verify-approval` recomputes from the policy
it is given. A file is named as the policy wrote it (relative to the policy's folder), so a copy
moved with the same files is the same policy, and a copy beside other files is not.

URL feeds are named by their URL (the text covers it); what they served is in the advisory
check's evidence, by digest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.trust.policy import BUILTIN_POLICIES, Policy, builtin_policy_path, is_builtin
from dflash_guard.urls import has_scheme

MAX_CLOSURE_FILES = 100_000  # a feed folder of osv.dev's records stays far below
_MAX_LISTED = 5


@dataclasses.dataclass(frozen=True, order=True)
class ClosureFile:
    """One file a policy names: the field that names it, its name, the sha256 of its bytes."""

    field: str
    path: str
    sha256: str

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "path": self.path, "sha256": self.sha256}


@dataclasses.dataclass(frozen=True)
class PolicyClosure:
    """The policy text's sha256, the built-in it extends (name, sha256) and its files."""

    text_sha256: str
    extends: tuple[str, str] | None
    files: tuple[ClosureFile, ...]

    @property
    def digest(self) -> str:
        """`sha256:HEX` over the canonical JSON of the closure: the record's policy digest."""
        return "sha256:" + canonical_digest(self.to_json())

    def to_json(self) -> dict[str, Any]:
        extends = ({"name": self.extends[0], "sha256": self.extends[1]}
                   if self.extends is not None else None)
        return {"text_sha256": self.text_sha256, "extends": extends,
                "files": [f.to_json() for f in self.files]}

    def differences(self, recorded: Mapping[str, Any]) -> list[str]:
        """How a record's closure listing differs from this one (empty: it does not)."""
        problems = []
        if recorded.get("text_sha256") != self.text_sha256:
            problems.append("the policy text differs")
        theirs = recorded.get("extends")
        mine = self.to_json()["extends"]
        if theirs != mine:
            problems.append(f"extends {_named(theirs)} in the record, {_named(mine)} here")
        before: dict[tuple[Any, Any], Any] = {(f.get("field"), f.get("path")): f.get("sha256")
                  for f in recorded.get("files", ()) if isinstance(f, Mapping)}
        now: dict[tuple[Any, Any], str] = {(f.field, f.path): f.sha256 for f in self.files}
        for key in sorted(set(before) | set(now), key=str):
            field, path = key
            if key not in now:
                problems.append(f"{field} {path}: in the record, not named here")
            elif key not in before:
                problems.append(f"{field} {path}: named here, not in the record")
            elif before[key] != now[key]:
                problems.append(f"{field} {path}: other bytes than the record's (sha256 "
                                f"{str(before[key])[:12]}... there, {now[key][:12]}... here)")
        return problems


def _named(extends: Any) -> str:
    if not isinstance(extends, Mapping):
        return "nothing"
    return f"{extends.get('name')} (sha256 {str(extends.get('sha256'))[:12]}...)"


def canonical_digest(listing: Mapping[str, Any]) -> str:
    """The hex sha256 of a closure listing's canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(listing, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _hash(path: Path, field: str) -> str:
    try:
        return sha256_file(path)
    except InputError as error:
        raise InputError(f"policy {field}: {error}") from None
    except OSError as error:
        raise InputError(f"policy {field}: cannot read {path}: "
                         f"{error.strerror or error}") from None


def _name(path: Path, base: Path) -> str:
    """`path` as the policy names it: relative to its folder when inside it."""
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)


def _folder_files(folder: Path) -> list[Path]:
    """Every regular file under a feed folder (signatures included: they decide too), sorted;
    symlinked folders are not entered (the feed reader does not enter them either)."""
    found = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        found += [Path(root) / n for n in sorted(names)]
        if len(found) > MAX_CLOSURE_FILES:
            raise InputError(f"advisory feed {folder}: more than {MAX_CLOSURE_FILES:,} files")
    return found


def policy_closure(policy: Policy) -> PolicyClosure:
    """The closure of `policy` as loaded (before an operator's `accepting`): every file it
    names hashed now. A file that cannot be read is an `InputError`."""
    source = Path(policy.source)
    base = source.parent
    files: set[ClosureFile] = set()
    for field, path in policy.files():
        if field == "--policy" or has_scheme(str(path)):
            continue
        if path.is_dir():
            for member in _folder_files(path):
                files.add(ClosureFile(field, _name(member, base), _hash(member, field)))
        else:
            files.add(ClosureFile(field, _name(path, base), _hash(path, field)))
    extends = None
    if policy.extends is not None and not is_builtin(policy):
        if policy.extends in BUILTIN_POLICIES:
            extends = (policy.extends, _hash(builtin_policy_path(policy.extends), "extends"))
        else:  # a policy file, relative to the one that extends it (its text; see limits.md)
            extends = (policy.extends,
                       _hash(Path(policy.source).parent / policy.extends, "extends"))
    return PolicyClosure(policy.digest.removeprefix("sha256:"), extends, tuple(sorted(files)))


def closure_changes(before: PolicyClosure, policy: Policy) -> list[str]:
    """What changed in `policy`'s closure since `before` was taken (empty: nothing)."""
    try:
        after = policy_closure(policy)
    except InputError as error:
        return [str(error)]
    return after.differences(before.to_json())


def summary(problems: Sequence[str]) -> str:
    """Problems joined for one line, the first few named."""
    more = f" (and {len(problems) - _MAX_LISTED} more)" if len(problems) > _MAX_LISTED else ""
    return "; ".join(problems[:_MAX_LISTED]) + more
