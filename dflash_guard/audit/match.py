"""Matching advisories against what a lockfile pins: engine commits, Hub revisions, packages.

Three kinds of subject, each compared the way OSV defines it:
- an engine (git URL + commit) and a Hub repo (`pkg:huggingface/ORG/NAME` or a `GIT` range over
  `https://huggingface.co/ORG/NAME`) at a commit: exact commits in `versions`, and `GIT` ranges
  decided on the commit graph with `git merge-base --is-ancestor` in a local clone. Without a
  clone (or when a commit is missing from it) only exact event commits decide; every other range
  is reported as *unknown*, never as clean;
- a PyPI package at a version: `versions` and `ECOSYSTEM` (or `SEMVER`) ranges, ordered with
  `packaging.version`, following OSV's evaluation pseudocode.

An engine is also the package it is released as (`trust.engines.UPSTREAMS`: vLLM's repository
is PyPI's `vllm`), which is how its advisories are published (ECOSYSTEM ranges, no GIT range).
Such an advisory is decided on the engine's release version, proven only by evidence the policy
trusts (`trust.engines.engine_build`: its release map, or a tag signed by a key it lists); the
lock's label (`#v0.11.0`) and a clone's own tags are never evidence. Without one: *unknown*.
An engine's advisories follow its identity, not its URL's spelling: an engine whose URL is no
known upstream nor a mirror the policy declares (and whose commit no release map pins) has an
unproven identity, and every advisory about an engine (an engine package, a GIT repository)
is *unknown* for it.

Every entry that names a locked subject gives a verdict: a range this audit cannot evaluate for
it, or an entry with neither ranges nor versions, is *unknown*, never silence.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dflash_guard import rules
from dflash_guard.audit.osv import Advisory, Affected, Range
from dflash_guard.errors import InputError
from dflash_guard.pins.lockfile import Lockfile
from dflash_guard.severity import Severity
from dflash_guard.trust.engines import ENGINE_PACKAGES, EngineBuild, engine_build
from dflash_guard.trust.gitclone import GitClone
from dflash_guard.urls import repo_key

HF_URL = "https://huggingface.co/"
HF_HOST = "huggingface.co/"
RELEASE_TAG_RE = re.compile(r"^v?(\d+(\.\d+)+\S*)$")


@dataclasses.dataclass(frozen=True)
class Subject:
    """One thing the lock pins: an engine or Hub repo at a commit, or a package at a version."""

    kind: str  # "engine", "hub" or "pypi"
    name: str  # engine name, ORG/NAME, or the canonical package name
    label: str  # how a report names it
    pin: str  # the commit or the version
    urls: frozenset[str] = frozenset()  # normalised repository URLs (git subjects)
    packages: frozenset[tuple[str, str]] = frozenset()  # an engine's released packages
    build: EngineBuild | None = None  # an engine's proven identity and release


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


def lock_subjects(lock: Lockfile, builds: Mapping[str, EngineBuild] | None = None
                  ) -> list[Subject]:
    """Every engine, Hub artifact (and remote-code repo) and package of a `Lockfile`; `builds`
    (by engine name) is what the evidence proves of each engine (default: no evidence)."""
    subjects = []
    for e in lock.engines:
        build = (builds or {}).get(e.name) or engine_build(e, None)
        urls = {normalise_repo_url(e.url)} | ({build.identity} if build.identity else set())
        subjects.append(Subject("engine", e.name, f"engine {e.name}@{e.commit[:12]}", e.commit,
                                frozenset(urls), build.packages, build))
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


def _package(entry: Affected) -> tuple[str, str] | None:
    """The entry's (ecosystem, canonical name), for a package ecosystem (not GIT)."""
    ecosystem = (entry.ecosystem or "").split(":", 1)[0]
    if not ecosystem or ecosystem == "GIT" or not entry.name:
        return None
    return ecosystem, canonicalize_name(entry.name) if ecosystem == "PyPI" else entry.name


def _names_subject(entry: Affected, subject: Subject) -> bool:
    """Whether the entry's package itself names the subject (not only one of its ranges)."""
    if subject.kind == "pypi":
        return _package(entry) == ("PyPI", subject.name)
    if subject.kind == "hub" and entry.hf_repo is not None:
        return entry.hf_repo.casefold() == subject.name.casefold()
    if subject.kind == "engine" and _package(entry) in subject.packages:
        return True
    return (entry.ecosystem or "").split(":", 1)[0] == "GIT" and bool(entry.name) and (
        normalise_repo_url(entry.name or "") in subject.urls)


def release_version(build: EngineBuild | None) -> tuple[Version | None, str]:
    """The engine's proven release version (`trust.engines`), or None and why not."""
    if build is None or build.version is None:
        why = build.how if build is not None else "no evidence"
        return None, f"no release is proven for the locked commit ({why})"
    match = RELEASE_TAG_RE.match(build.version)
    try:
        return Version(match.group(1) if match else build.version), build.how
    except InvalidVersion:
        return None, f"release {build.version} is no version to order ({build.how})"


def _about_engines(entry: Affected) -> bool:
    """Whether an entry could be about an engine: an engine's package, or a git repository
    (other than a Hub repo)."""
    if entry.hf_repo is not None:
        return False
    if _package(entry) in ENGINE_PACKAGES:
        return True
    if (entry.ecosystem or "").split(":", 1)[0] == "GIT" and entry.name and not (
            normalise_repo_url(entry.name).startswith(HF_HOST)):
        return True
    return any(r.type == "GIT" and not normalise_repo_url(r.repo or "").startswith(HF_HOST)
               for r in entry.ranges)


def _version_results(entry: Affected, pin: str, why: str) -> list[tuple[bool | None, str]]:
    """The entry's `versions` and ECOSYSTEM/SEMVER ranges at version `pin`."""
    if any(_same_version(v, pin) for v in entry.versions):
        return [(True, f"version {pin} is listed{why}")]
    results: list[tuple[bool | None, str]] = []
    for rng in entry.ranges:
        if rng.type not in ("ECOSYSTEM", "SEMVER"):
            results.append((None, f"a {rng.type} range cannot be evaluated for version {pin}"))
            continue
        try:
            hit = _version_range(Version(pin), rng)
        except InvalidVersion as error:
            results.append((None, f"cannot order versions: {error}"))
            continue
        results.append((hit, f"{rng.type} range{why}"))
    return results


def _entry_results(entry: Affected, subject: Subject, clone: GitClone | None
                   ) -> list[tuple[bool | None, str]]:
    """Each decision this entry makes about the subject: (True/False/None, why); an entry
    that names the subject always makes one."""
    named = _names_subject(entry, subject)
    results: list[tuple[bool | None, str]]
    if subject.kind == "pypi" or (subject.kind == "engine" and named
                                  and _package(entry) in subject.packages):
        if not named:
            return []
        pin, why = subject.pin, ""
        if subject.kind == "engine":
            version, why = release_version(subject.build)
            if version is None:
                return [(None, f"{entry.ecosystem} {entry.name}: {why}")]
            pin, why = str(version), f" ({why})"
        results = _version_results(entry, pin, why)
    else:
        git_ranges = [r for r in entry.ranges if r.type == "GIT"
                      and (named or normalise_repo_url(r.repo or "") in subject.urls)]
        if not named and not git_ranges:
            build = subject.build
            if subject.kind == "engine" and build is not None and build.identity is None and (
                    _about_engines(entry)):
                return [(None, f"the engine's identity is not proven ({build.how})")]
            return []
        if subject.pin in entry.versions:
            return [(True, f"commit {subject.pin[:12]} is listed")]
        results = []
        for rng in git_ranges:
            decided, why = _git_range(subject.pin, rng, clone)
            results.append((decided, f"GIT range over {rng.repo}: {why}"))
        results += [(None, f"a {r.type} range cannot be evaluated for a commit")
                    for r in entry.ranges if named and r.type != "GIT"]
    if not results:
        if entry.versions:
            return [(False, "not among the listed versions")]
        return [(None, "the entry names it with neither a range nor a version")]
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
