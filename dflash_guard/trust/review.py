"""The reviewer's way past `reviewed_code`: the remote code the gate would refuse as unreviewed,
each file with what the scan found it can do (its capability report), the chat templates it
would refuse as unreviewed (`reviewed_templates`), the loaded files whose meaning it refuses at
the policy's `fail_on` (`REVIEWED_FILE_RULES`: generation configs and GGUFs whose defaults change
every answer, tokenizer files that are not the upstream's; cleared by `reviewed_files`), and the
policy file that records the review: a built-in policy extended with the reviewed sha256s,
commented.

The files are verified against the lock first (every byte hashed, no stat cache), so a digest
written here is the locked one; a policy only ever names code by sha256, so a file changed
afterwards is unreviewed again. The capability report is a review aid, not a verdict: the
static rules see what `ast` can resolve (see `scan/code`), and the reviewer still reads
the code.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from pathlib import Path

import yaml

from dflash_guard import rules
from dflash_guard.errors import InputError
from dflash_guard.findings import Finding, ScanReport
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.pins.lockfile import Artifact, Lockfile
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.scan.code import remote_code
from dflash_guard.scan.code.capabilities import RULE_LABELS
from dflash_guard.scan.weights import gguf
from dflash_guard.severity import Severity
from dflash_guard.templates.locate import unreviewed_digest
from dflash_guard.trust.judge import locked_code_sha256
from dflash_guard.trust.policy import (
    BUILTIN_POLICIES,
    Policy,
    RemoteCode,
    ReviewedFile,
    ReviewedTemplate,
    Templates,
    load_policy,
)

REVIEW_COMMAND = "dflash-guard review"


@dataclasses.dataclass(frozen=True)
class CodeToReview:
    """One remote-code file nobody has reviewed under the policy, as the gate names it."""

    role: str
    path: str  # inside the role's folder, or `ORG/REPO--module.py` for code another repo serves
    sha256: str  # "" when there are no bytes to review (the file is missing)
    capabilities: tuple[Finding, ...]  # the scan's remote-code findings on the file
    scanned: bool  # False: served by another repository, verified by the lock, not scanned

    @property
    def name(self) -> str:
        """`ROLE/PATH`, as the gate's refusal names it."""
        return f"{self.role}/{self.path}"

    @property
    def can(self) -> tuple[str, ...]:
        """The capabilities its findings at `medium` or above name (spawn, connect...), each
        once, most severe first."""
        ranked = sorted(self.capabilities, key=lambda f: -f.severity)
        return tuple(dict.fromkeys(RULE_LABELS[f.rule_id] for f in ranked
                                   if f.severity >= Severity.medium and f.rule_id in RULE_LABELS))

    def to_json(self) -> dict[str, object]:
        return {"role": self.role, "path": self.path, "sha256": self.sha256 or None,
                "scanned": self.scanned, "can": list(self.can),
                "capabilities": [f.to_json() for f in self.capabilities]}


@dataclasses.dataclass(frozen=True)
class TemplateToReview:
    """A chat template that is neither a published one of the catalog nor reviewed, where the
    artifact's tier wants it reviewed (`templates: reviewed-only`)."""

    role: str
    path: str  # the file inside the role's folder
    member: str | None  # which template of the file (a config's or a GGUF's key), if named
    sha256: str  # of the template's UTF-8 text

    @property
    def name(self) -> str:
        """`ROLE/PATH [member]`, as the gate's refusal names it."""
        return f"{self.role}/{self.path}" + (f" [{self.member}]" if self.member else "")

    def to_json(self) -> dict[str, object]:
        return {"role": self.role, "path": self.path, "member": self.member,
                "sha256": self.sha256}


UPSTREAM_RULES = frozenset({rules.UPSTREAM_DIFF.id, rules.UPSTREAM_NONE.id})
# the rules whose findings a `reviewed_files` entry (the file's sha256) clears
REVIEWED_FILE_RULES = UPSTREAM_RULES | {rules.GENERATION_DEFAULTS.id}


@dataclasses.dataclass(frozen=True)
class FileToReview:
    """A loaded file whose meaning the gate refuses until its sha256 is on `reviewed_files`
    (`REVIEWED_FILE_RULES`)."""

    role: str
    path: str  # the file inside the role's folder
    sha256: str  # of its bytes, as the lock records them; "" when they could not be read
    findings: tuple[Finding, ...]  # the scan's `REVIEWED_FILE_RULES` findings on it

    @property
    def name(self) -> str:
        """`ROLE/PATH`, as the gate's refusal names it."""
        return f"{self.role}/{self.path}"

    @property
    def kind(self) -> str:
        """What is to be read: a GGUF's sampling metadata, a generation config's defaults, or
        a file that is not the upstream's."""
        if any(f.rule_id in UPSTREAM_RULES for f in self.findings):
            return "not the upstream's"
        return ("GGUF defaults" if any(f.detector == gguf.DETECTOR for f in self.findings)
                else "generation defaults")

    def to_json(self) -> dict[str, object]:
        return {"role": self.role, "path": self.path, "sha256": self.sha256 or None,
                "findings": [f.to_json() for f in self.findings]}


@dataclasses.dataclass(frozen=True)
class Review:
    """What `review` found and, once written, where the policy that records it is."""

    base: str  # the built-in policy the written one extends
    files: tuple[CodeToReview, ...]
    written: str | None = None
    fail_on: Severity = Severity.high  # the base's scan.fail_on: a finding at it still fails
    denied: tuple[str, ...] = ()  # roles whose tier denies remote code, reviewed or not
    templates: tuple[TemplateToReview, ...] = ()
    configs: tuple[FileToReview, ...] = ()  # for `reviewed_files`

    @property
    def reviewable(self) -> tuple[CodeToReview, ...]:
        """The files with bytes to review (a missing file has none)."""
        return tuple(f for f in self.files if f.sha256)

    @property
    def passed(self) -> bool:
        """Nothing is left unreviewed: there was nothing, or the policy covering it is written
        (and no file lacked the bytes to review)."""
        return not (self.files or self.templates or self.configs) or (
            self.written is not None and len(self.reviewable) == len(self.files)
            and all(c.sha256 for c in self.configs))

    def to_json(self) -> dict[str, object]:
        return {"passed": self.passed, "extends": self.base, "written": self.written,
                "fail_on": self.fail_on.name, "denied_roles": list(self.denied),
                "unreviewed": [f.to_json() for f in self.files],
                "unreviewed_templates": [t.to_json() for t in self.templates],
                "unreviewed_files": [c.to_json() for c in self.configs]}

    def still_failing(self, code: CodeToReview) -> list[str]:
        """The rules of the file's findings the gate refuses even once it is reviewed (at
        `fail_on`+, unless a `scan:RULE` waiver covers them), each once."""
        return list(dict.fromkeys(f.rule_id for f in code.capabilities
                                  if f.severity >= self.fail_on))


def find_unreviewed(lock: Lockfile, locations: Mapping[str, Path], base: str,
                    progress: Progress = NO_PROGRESS) -> Review:
    """The remote code of every located artifact that the built-in policy `base` does not list
    in `reviewed_code`, with the scan's capability findings for each file, the chat templates
    it does not list in `reviewed_templates` where the tier wants them reviewed, and the
    generation configs and GGUFs the gate refuses at its `fail_on` (unwaived) that
    `reviewed_files` does not list."""
    from dflash_guard.pins.loaded import deploy_engines
    from dflash_guard.scan import scan_paths

    policy = load_policy(_builtin(base))
    files: list[CodeToReview] = []
    templates: list[TemplateToReview] = []
    configs: list[FileToReview] = []
    denied: list[str] = []
    today = dt.datetime.now(dt.UTC).date()
    waived = {rule for rule in REVIEWED_FILE_RULES if policy.waiver("scan", rule, today)}
    for artifact in lock.deployed:
        folder = locations.get(artifact.role)
        if folder is None:
            continue
        # The tier an unsigned lock gives (a signed one may give a Hub artifact its org's).
        rule = policy.rule(policy.artifact_tier(artifact, provenance_trusted=False))
        is_drafter = artifact.role == "drafter"
        report = scan_paths([folder], target=locations.get("target") if is_drafter else None,
                            reviewed_sha256=policy.reviewed_sha256,
                            reviewed_templates=policy.reviewed_template_sha256,
                            reviewed_files=policy.reviewed_file_sha256,
                            engines=deploy_engines(lock),
                            upstream_folder=_upstream(policy, lock, artifact.role, locations),
                            progress=progress)
        # a finding at fail_on refuses on every tier
        configs += _configs(artifact, folder, report, policy.fail_on, waived)
        if rule.templates is Templates.reviewed_only:  # as the gate judges: loaded files only
            templates += [TemplateToReview(artifact.role, f.file, f.member, digest)
                          for f in filter(report.loaded, report.findings)
                          if (digest := unreviewed_digest(f)) is not None]
        if rule.remote_code is RemoteCode.allow:
            continue
        locked = locked_code_sha256(artifact)
        for code in report.remote_code:
            sha256, scanned = code.sha256, bool(code.sha256)
            if not sha256 and code.path in locked:
                sha256 = locked[code.path]
            if sha256 in policy.reviewed_sha256:
                continue
            found = tuple(f for f in report.findings if f.file == code.path
                          and f.detector == remote_code.DETECTOR
                          and f.rule_id != rules.RC_UNREVIEWED.id)
            files.append(CodeToReview(artifact.role, code.path, sha256, found, scanned))
            if rule.remote_code is RemoteCode.deny and artifact.role not in denied:
                denied.append(artifact.role)
    return Review(base, tuple(files), fail_on=policy.fail_on,
                  denied=tuple(denied), templates=tuple(templates), configs=tuple(configs))


def _upstream(policy: Policy, lock: Lockfile, role: str,
              locations: Mapping[str, Path]) -> Path | None:
    """The folder of the upstream the policy names for `role`, when the lock locks that repo
    and commit (whether its provenance is proven is the gate's to judge)."""
    named, locked = policy.upstream_of(role), lock.artifact(f"{role}-upstream")
    if named is None or locked is None or (locked.repo, locked.commit) != (named.repo,
                                                                            named.commit):
        return None
    return locations.get(locked.role)


def _configs(artifact: Artifact, folder: Path, report: ScanReport,
             fail_on: Severity, waived: set[str]) -> list[FileToReview]:
    """The loaded files of `report` with a finding of `REVIEWED_FILE_RULES` (not `waived`) at
    `fail_on`+, each with all its findings of those rules (the review clears them all) and the
    sha256 of its bytes: the lock's, else of the bytes on disk (never a field of the file)."""
    found: dict[str, list[Finding]] = {}
    for finding in filter(report.loaded, report.findings):
        if finding.rule_id in REVIEWED_FILE_RULES and finding.rule_id not in waived:
            found.setdefault(finding.file, []).append(finding)
    configs = []
    for path, findings in found.items():
        if max(f.severity for f in findings) < fail_on:
            continue
        locked = artifact.file(path)
        sha256 = locked.sha256 if locked is not None else _sha256(folder / path)
        configs.append(FileToReview(artifact.role, path, sha256, tuple(findings)))
    return configs


def _sha256(path: Path) -> str:
    """The sha256 of the file's bytes, read in chunks (a GGUF may be many GB)."""
    try:
        return sha256_file(path)
    except InputError:
        return ""  # nothing to review: listed, never written


def _builtin(name: str) -> str:
    """`--extends NAME`: a built-in policy, or a policy file (a team's base policy)."""
    if name not in BUILTIN_POLICIES and not Path(name).is_file():
        raise InputError(f"--extends {name!r}: expected a built-in policy "
                         f"({', '.join(BUILTIN_POLICIES)}) or a policy file")
    return name


def _what(base: str) -> str:
    return f"the built-in `{base}` policy" if base in BUILTIN_POLICIES else f"the policy `{base}`"


def _comment(text: str) -> str:
    """`text` as one YAML comment line: a line break or control character in a scanned name
    could otherwise end the comment and forge a policy key."""
    return "# " + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100
                          else f"\\u{ord(c):04x}" for c in text)


def _capabilities(review: Review, code: CodeToReview) -> list[str]:
    failing = review.still_failing(code)
    notes = [_comment(f"  the gate still refuses {', '.join(failing)} at fail_on "
                      f"{review.fail_on.name}, reviewed or not (a waiver scan:RULE covers it)")
             ] if failing else []
    return _found(code) + notes


def _found(code: CodeToReview) -> list[str]:
    if not code.scanned:
        return [_comment("  not scanned: another repository serves it; the lock pins its bytes "
                         "(read it there)")]
    if not code.capabilities:
        return [_comment("  capabilities: none the scan could see")]
    summary = [_comment(f"  can: {', '.join(code.can)}")] if code.can else []
    return summary + [_comment(f"  {f.severity.name} {f.rule_id}"
                     f"{f' line {f.line}' if f.line else ''}: {f.message}")
            for f in code.capabilities]


def policy_text(review: Review, reviewer: str, today: dt.date, name: str,
                extends_as: str | None = None) -> str:
    """The policy file recording `review`: `extends` the base (spelled `extends_as`: a policy
    file's path from the written file's folder), its own reviewed entries kept (a list in an
    extending policy replaces the base's), each new entry with its capability report as
    comments. Loading it back must give the same digests (checked by the caller)."""
    base = load_policy(_builtin(review.base))
    lines = [
        _comment(f"Written by `{REVIEW_COMMAND}` on {today.isoformat()}: "
                 f"{_what(review.base)}"),
        "# plus the code, templates and files reviewed below, by sha256 (a changed file is "
        "unreviewed again).",
        "# Check it with `dflash-guard policy check FILE`; gate with `--policy ./FILE`.",
        *(_comment(f"Note: `{review.base}` denies remote code for the {role}'s tier: the gate "
                   "refuses it, reviewed or not (see local_tier)") for role in review.denied),
        yaml.safe_dump({"extends": extends_as or review.base, "name": name},
                       sort_keys=False).rstrip("\n"),
        "reviewed_code:" if base.reviewed_code or review.reviewable else "reviewed_code: []",
    ]
    kept = [{"sha256": r.sha256, "path": r.path, "reviewer": r.reviewer, "date": r.date}
            for r in base.reviewed_code]
    if kept:
        lines.append(_comment(f"  kept from {_what(review.base)}"))
        lines += _entries(kept)
    for code in review.reviewable:
        lines.append(_comment(f"{code.name} (sha256 {code.sha256})"))
        lines += _capabilities(review, code)
        lines += _entries([{"sha256": code.sha256, "path": code.name, "reviewer": reviewer,
                            "date": today}])
    return "\n".join(lines + _template_lines(review, base.reviewed_templates, reviewer, today)
                     + _file_lines(review, base.reviewed_files, reviewer, today)) + "\n"


def _template_lines(review: Review, kept: tuple[ReviewedTemplate, ...], reviewer: str,
                    today: dt.date) -> list[str]:
    """`reviewed_templates:` with the base's entries and one per template reviewed now."""
    return _digest_section("reviewed_templates", review, [(t.sha256, t.note) for t in kept], [
        (t.sha256, t.name, [_comment(f"{t.name}: chat template (sha256 {t.sha256})")])
        for t in review.templates], reviewer, today)


def _file_lines(review: Review, kept: tuple[ReviewedFile, ...], reviewer: str,
                today: dt.date) -> list[str]:
    """`reviewed_files:` with the base's entries and one per file reviewed now, commented with
    what the scan found (its messages quote the untrusted file: `_comment` escapes them)."""
    return _digest_section("reviewed_files", review, [(f.sha256, f.note) for f in kept], [
        (c.sha256, c.name, [_comment(f"{c.name}: {c.kind} (sha256 {c.sha256})"),
                            *(_comment(f"  {f.severity.name} {f.rule_id}: {f.message}")
                              for f in c.findings)])
        for c in review.configs], reviewer, today)


def _digest_section(key: str, review: Review, kept: list[tuple[str, str]],
                    new: list[tuple[str, str, list[str]]], reviewer: str,
                    today: dt.date) -> list[str]:
    """A policy list of `{sha256, note}`: the base's entries (`kept`: a list in an extending
    policy replaces the base's), then each `(sha256, name, comments)` reviewed now, once per
    digest (none without one)."""
    lines = []
    if kept:
        lines.append(_comment(f"  kept from {_what(review.base)}"))
        lines += _entries([{"sha256": sha256, "note": note} for sha256, note in kept])
    written = {sha256 for sha256, _ in kept}
    for sha256, name, comments in new:
        if not sha256 or sha256 in written:
            continue
        written.add(sha256)
        note = f"{name}, reviewed by {reviewer} on {today.isoformat()}"
        lines += comments + _entries([{"sha256": sha256, "note": note}])
    return [f"{key}:" if lines else f"{key}: []", *lines]


def _entries(entries: list[dict[str, object]]) -> list[str]:
    dumped = yaml.safe_dump(entries, sort_keys=False, default_flow_style=False, width=10_000)
    return ["  " + line for line in dumped.splitlines()]
