"""Matching advisories against what a lockfile pins: engine commits, Hub revisions, packages.

Three kinds of subject, each compared the way OSV defines it:
- an engine (git URL + commit) and a Hub repo (`pkg:huggingface/ORG/NAME` or a `GIT` range over
  `https://huggingface.co/ORG/NAME`) at a commit: exact commits in `versions`, and `GIT` ranges
  decided on the commit graph with `git merge-base --is-ancestor` in a local clone. Without a
  clone (or when a commit is missing from it) only exact event commits decide; every other range
  is reported as *unknown*, never as clean;
- a PyPI package at a version: `versions` and `ECOSYSTEM` (or `SEMVER`) ranges, ordered with
  `packaging.version`, following OSV's evaluation pseudocode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dflash_guard import rules
from dflash_guard.audit.osv import Advisory, Affected, Range
from dflash_guard.errors import InputError
from dflash_guard.pins.lockfile import Lockfile
from dflash_guard.severity import Severity
from dflash_guard.trust.gitclone import GitClone
from dflash_guard.urls import repo_key

HF_URL = "https://huggingface.co/"


@dataclasses.dataclass(frozen=True)
class Subject:
    """One thing the lock pins: an engine or Hub repo at a commit, or a package at a version."""

    kind: str  # "engine", "hub" or "pypi"
    name: str  # engine name, ORG/NAME, or the canonical package name
    label: str  # how a report names it
    pin: str  # the commit or the version
    urls: frozenset[str] = frozenset()  # normalised repository URLs (git subjects)


@dataclasses.dataclass(frozen=True)
class AuditFinding:
    """An advisory that affects a subject (`DG-ADV-AFFECTED`), or one that could not be decided
    (`DG-ADV-UNKNOWN`), with the advisory's severity either way."""

    rule_id: str
    severity: Severity
    advisory: str
    subject: str
    message: str
    source: str
    aliases: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "rule_id": self.rule_id,
            "severity": self.severity.name,
            "advisory": self.advisory,
            "aliases": list(self.aliases),
            "subject": self.subject,
            "message": self.message,
            "source": self.source,
        }


normalise_repo_url = repo_key  # an advisory's `repo` and a lock's engine URL, compared


def lock_subjects(lock: Lockfile) -> list[Subject]:
    """Every engine, Hub artifact (and remote-code repo) and package of a `Lockfile`."""
    subjects = [
        Subject("engine", e.name, f"engine {e.name}@{e.commit[:12]}", e.commit,
                frozenset({normalise_repo_url(e.url)}))
        for e in lock.engines
    ]
    for artifact in lock.artifacts:
        refs: list[tuple[str, str, str]] = []
        if artifact.source == "hub":
            if artifact.repo is None or artifact.commit is None:
                raise InputError(f"artifacts: {artifact.role}: a Hub artifact without a repo "
                                 "and commit")
            refs.append((artifact.role, artifact.repo, artifact.commit))
        refs += [(f"{artifact.role} code", c.repo, c.commit) for c in artifact.code_refs]
        for role, repo, commit in refs:
            subjects.append(Subject("hub", repo, f"{role} {repo}@{commit[:12]}", commit,
                                    frozenset({normalise_repo_url(HF_URL + repo)})))
    subjects += [
        Subject("pypi", canonicalize_name(p.name), f"package {p.name}=={p.version}", p.version)
        for p in lock.packages
    ]
    return subjects


# --- git ancestry ----------------------------------------------------------------------------


def _git_range(commit: str, rng: Range, clone: GitClone | None) -> tuple[bool | None, str]:
    """(affected?, why): None when the range cannot be decided for `commit`."""
    introduced, fixed = rng.values("introduced"), rng.values("fixed")
    last, limits = rng.values("last_affected"), rng.values("limit")
    if clone is not None:
        missing = [c for c in {commit, *introduced, *fixed, *last, *limits}
                   if c not in ("0", "*") and not clone.has(c)]
        if missing:
            return None, f"commit {sorted(missing)[0][:12]} is not in the clone {clone.path}"
        return _on_graph(commit, introduced, fixed, last, limits, clone), "on the commit graph"
    if commit in fixed or commit in limits:
        return False, "it is a fixed (or limit) commit of the range"
    if commit in introduced or commit in last:
        return True, "it is an event commit of the range"
    return None, "deciding the range needs the commit graph (pass --engine-repo NAME=CLONE)"


def _on_graph(commit: str, introduced: Sequence[str], fixed: Sequence[str],
              last: Sequence[str], limits: Sequence[str], clone: GitClone) -> bool:
    """OSV's GIT semantics: reachable from an introduced commit, with no fixed commit (or a
    last_affected one, strictly) between them, and below a limit when there are limits."""

    def at_or_after(older: str, newer: str) -> bool:
        return older == "0" or clone.is_ancestor(older, newer)

    def strictly_before(older: str, newer: str) -> bool:
        return older != newer and at_or_after(older, newer)

    if limits and "*" not in limits and not any(strictly_before(commit, m) for m in limits):
        return False
    for start in introduced:
        if not at_or_after(start, commit):
            continue
        fixed_since = any(at_or_after(start, f) and at_or_after(f, commit) for f in fixed)
        past_last = any(at_or_after(start, a) and strictly_before(a, commit) for a in last)
        if not (fixed_since or past_last):
            return True
    return False


# --- package versions (ECOSYSTEM ranges) -----------------------------------------------------


def _version_range(version: Version, rng: Range) -> bool:
    """OSV's `IncludedInRanges` for one range, with PEP 440 ordering (local labels dropped)."""
    version = Version(version.public)
    limits = rng.values("limit")
    if limits and not any("*" in m or version < Version(m) for m in limits):
        return False
    ordered = sorted((e for e in rng.events if e.kind != "limit"),
                     key=lambda e: Version("0") if e.value == "0" else Version(e.value))
    vulnerable = False
    for event in ordered:
        bound = Version("0") if event.value == "0" else Version(event.value)
        if event.kind == "introduced" and version >= bound:
            vulnerable = True
        elif (event.kind == "fixed" and version >= bound) or (
                event.kind == "last_affected" and version > bound):
            vulnerable = False
    return vulnerable


def _same_version(listed: str, pinned: str) -> bool:
    """A listed version matches the pin as PEP 440 `==` does: `2.5.0` matches `2.5.0+cpu`; a
    listed version with a local label matches only that build."""
    try:
        want, have = Version(listed), Version(pinned)
    except InvalidVersion:
        return listed == pinned
    return want == have if want.local else want == Version(have.public)


# --- one advisory against one subject --------------------------------------------------------


def _names_subject(entry: Affected, subject: Subject) -> bool:
    """Whether the entry's package itself names the subject (not only one of its ranges)."""
    if subject.kind == "pypi":
        return entry.ecosystem == "PyPI" and canonicalize_name(entry.name or "") == subject.name
    if subject.kind == "hub" and entry.hf_repo is not None:
        return entry.hf_repo.casefold() == subject.name.casefold()
    return (entry.ecosystem or "").split(":", 1)[0] == "GIT" and bool(entry.name) and (
        normalise_repo_url(entry.name or "") in subject.urls)


def _entry_results(entry: Affected, subject: Subject, clone: GitClone | None
                   ) -> list[tuple[bool | None, str]]:
    """Each decision this entry makes about the subject: (True/False/None, why)."""
    named = _names_subject(entry, subject)
    results: list[tuple[bool | None, str]] = []
    if subject.kind == "pypi":
        if not named:
            return []
        if any(_same_version(v, subject.pin) for v in entry.versions):
            return [(True, f"version {subject.pin} is listed")]
        for rng in entry.ranges:
            if rng.type not in ("ECOSYSTEM", "SEMVER"):
                continue
            try:
                hit = _version_range(Version(subject.pin), rng)
            except InvalidVersion as error:
                results.append((None, f"cannot order versions: {error}"))
                continue
            results.append((hit, f"{rng.type} range"))
        return results
    git_ranges = [r for r in entry.ranges if r.type == "GIT"
                  and (named or normalise_repo_url(r.repo or "") in subject.urls)]
    if not named and not git_ranges:
        return []
    if subject.pin in entry.versions:
        return [(True, f"commit {subject.pin[:12]} is listed")]
    for rng in git_ranges:
        decided, why = _git_range(subject.pin, rng, clone)
        results.append((decided, f"GIT range over {rng.repo}: {why}"))
    return results


def match_advisory(advisory: Advisory, subject: Subject, clone: GitClone | None
                   ) -> AuditFinding | None:
    """The finding for one advisory and one subject: affected, unknown, or None (clean)."""
    if advisory.withdrawn:
        return None
    results = [r for entry in advisory.affected for r in _entry_results(entry, subject, clone)]
    affected = [why for hit, why in results if hit]
    unknown = [why for hit, why in results if hit is None]
    if affected:
        rule, message = rules.ADV_AFFECTED.id, f"affected: {affected[0]}"
    elif unknown:
        rule, message = rules.ADV_UNKNOWN.id, f"not decided: {unknown[0]}"
    else:
        return None
    summary = f" ({advisory.summary})" if advisory.summary else ""
    return AuditFinding(rule, advisory.severity, advisory.id, subject.label,
                        f"{advisory.id}{summary} {message}", advisory.source, advisory.aliases)


def match_lock(advisories: Iterable[Advisory], subjects: Sequence[Subject],
               clones: Mapping[str, GitClone]) -> list[AuditFinding]:
    """Every advisory against every subject; `clones` maps an engine name or Hub repo to its
    local clone."""
    findings = []
    for advisory in advisories:
        for subject in subjects:
            finding = match_advisory(advisory, subject, clones.get(subject.name))
            if finding is not None:
                findings.append(finding)
    return sorted(findings, key=lambda f: (-f.severity, f.rule_id, f.advisory, f.subject))
