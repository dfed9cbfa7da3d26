"""Writing an OSV advisory for a platform team's own finding (`dflash-guard advisory new`).

One advisory names one subject: an engine (`GIT` range over its repository), a Hub repo
(`pkg:huggingface/ORG/NAME`, bad commits in `versions` and/or a `GIT` range), or a PyPI package
(`ECOSYSTEM` range and/or `versions`). The record is validated against the OSV schema before it
is written (atomically), so what `advisory new` writes `audit` reads; sign it with
`dflash-guard sign FILE --key KEY` (or keyless) like any other file.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dflash_guard.audit.match import HF_URL
from dflash_guard.audit.osv import HF_PURL_PREFIX, format_time, parse_advisory
from dflash_guard.errors import InputError
from dflash_guard.fileio import write_atomic
from dflash_guard.patterns import REPO_RE
from dflash_guard.severity import Severity

# GHSA's words for `database_specific.severity`, which `audit` reads back.
_GHSA_WORD = {Severity.low: "LOW", Severity.medium: "MODERATE", Severity.high: "HIGH",
              Severity.critical: "CRITICAL"}


@dataclasses.dataclass(frozen=True)
class Events:
    """The events of one range, each list in the order given."""

    introduced: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    last_affected: tuple[str, ...] = ()
    limit: tuple[str, ...] = ()

    def to_osv(self) -> list[dict[str, str]]:
        events = [{"introduced": v} for v in self.introduced]
        events += [{"fixed": v} for v in self.fixed]
        events += [{"last_affected": v} for v in self.last_affected]
        return events + [{"limit": v} for v in self.limit]

    @property
    def empty(self) -> bool:
        return not (self.introduced or self.fixed or self.last_affected or self.limit)


@dataclasses.dataclass(frozen=True)
class AdvisorySubject:
    """Exactly one of `engine` (a git URL), `hf_repo` (ORG/NAME) or `pypi` (a package name)."""

    engine: str | None = None
    hf_repo: str | None = None
    pypi: str | None = None


def _affected(subject: AdvisorySubject, events: Events, versions: Sequence[str]
              ) -> dict[str, Any]:
    given = [name for name, value in dataclasses.asdict(subject).items() if value]
    if len(given) != 1:
        raise InputError("name exactly one subject: --engine URL, --hf-repo ORG/NAME or "
                         "--pypi NAME")
    if events.empty and not versions:
        raise InputError("say what is affected: --introduced (with --fixed, --last-affected "
                         "or --limit) and/or --version")
    if not events.empty and not events.introduced:
        raise InputError("a range needs at least one --introduced (use 0 for 'from the start')")
    entry: dict[str, Any]
    if subject.pypi:
        entry = {"package": {"ecosystem": "PyPI", "name": subject.pypi,
                             "purl": f"pkg:pypi/{subject.pypi.lower()}"}}
        range_type, repo = "ECOSYSTEM", None
    elif subject.hf_repo:
        if not REPO_RE.match(subject.hf_repo):
            raise InputError(f"--hf-repo {subject.hf_repo}: expected ORG/NAME")
        repo = HF_URL + subject.hf_repo
        entry = {"package": {"ecosystem": "GIT", "name": repo,
                             "purl": HF_PURL_PREFIX + subject.hf_repo}}
        range_type = "GIT"
    else:
        repo = str(subject.engine)
        entry = {"package": {"ecosystem": "GIT", "name": repo}}
        range_type = "GIT"
    if not events.empty:
        repo_field = {"repo": repo} if repo is not None else {}
        entry["ranges"] = [{"type": range_type, **repo_field, "events": events.to_osv()}]
    if versions:
        entry["versions"] = list(versions)
    return entry


def new_advisory(
    advisory_id: str,
    subject: AdvisorySubject,
    *,
    summary: str,
    severity: Severity,
    events: Events = Events(),
    versions: Sequence[str] = (),
    details: str = "",
    aliases: Sequence[str] = (),
    references: Sequence[str] = (),
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """An OSV record for one finding, validated against the OSV schema (`InputError` if not)."""
    when = format_time((now or dt.datetime.now(dt.UTC)).replace(microsecond=0))
    record: dict[str, Any] = {
        "schema_version": "1.7.5",
        "id": advisory_id,
        "modified": when,
        "published": when,
        "summary": summary,
        "details": details or summary,
        "affected": [_affected(subject, events, versions)],
        "database_specific": {"severity": _GHSA_WORD[severity]},
    }
    if aliases:
        record["aliases"] = list(aliases)
    if references:
        record["references"] = [{"type": "WEB", "url": url} for url in references]
    parse_advisory(record, f"advisory {advisory_id}")
    return record


def write_advisory(record: dict[str, Any], out: Path, *, force: bool = False) -> None:
    """Write the record as JSON, whole or not at all; an existing file needs `force`."""
    if out.exists() and not force:
        raise InputError(f"{out} exists: pass --force to replace it")
    write_atomic(out, json.dumps(record, indent=2) + "\n")
