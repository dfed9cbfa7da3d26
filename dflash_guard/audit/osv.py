"""OSV advisories: validated against the published OSV JSON Schema, then read into frozen records.

The schema is `osv-schema.json` beside this module (copied unchanged from ossf/osv-schema, see
`osv-schema.NOTICE`). Validation is `jsonschema`'s draft 2020-12 validator, so a malformed
advisory is refused with the file and the field (`feed.json: affected[0].ranges[0].events[1]:
...`), never half-read. The records keep only what matching needs: the subjects (`package`,
`ranges`, `versions`), the severity and the references a report shows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import importlib.resources
import json
from collections.abc import Iterable, Mapping
from typing import Any

from dflash_guard.errors import InputError
from dflash_guard.severity import Severity

SCHEMA_RESOURCE = "osv-schema.json"
HF_PURL_PREFIX = "pkg:huggingface/"
# GHSA's `database_specific.severity` words and the `Ubuntu` severity type, mapped to ours.
_SEVERITY_WORDS = {
    "low": Severity.low,
    "negligible": Severity.low,
    "moderate": Severity.medium,
    "medium": Severity.medium,
    "high": Severity.high,
    "critical": Severity.critical,
}
# An advisory that states no severity we can read is treated as high: unrated is not harmless.
UNRATED_SEVERITY = Severity.high


@dataclasses.dataclass(frozen=True)
class Event:
    """One event of a range: `introduced`, `fixed`, `last_affected` or `limit`, and its value."""

    kind: str
    value: str


@dataclasses.dataclass(frozen=True)
class Range:
    """An `affected[].ranges[]` entry: `GIT`, `ECOSYSTEM` or `SEMVER`, its repo and events."""

    type: str
    events: tuple[Event, ...]
    repo: str | None = None

    def values(self, kind: str) -> tuple[str, ...]:
        """The values of every event of `kind`, in order."""
        return tuple(e.value for e in self.events if e.kind == kind)


@dataclasses.dataclass(frozen=True)
class Affected:
    """An `affected[]` entry: which package (ecosystem, name, purl) and which versions/ranges."""

    ecosystem: str | None
    name: str | None
    purl: str | None
    ranges: tuple[Range, ...]
    versions: tuple[str, ...]

    @property
    def hf_repo(self) -> str | None:
        """`ORG/NAME` when the package URL is `pkg:huggingface/ORG/NAME[@REV]`."""
        if not self.purl or not self.purl.startswith(HF_PURL_PREFIX):
            return None
        path = self.purl.removeprefix(HF_PURL_PREFIX).split("?", 1)[0].split("#", 1)[0]
        return path.split("@", 1)[0].strip("/") or None


@dataclasses.dataclass(frozen=True)
class Advisory:
    """One validated OSV record and the file it came from."""

    id: str
    modified: dt.datetime
    source: str
    summary: str
    aliases: tuple[str, ...]
    severity: Severity
    severity_stated: bool
    affected: tuple[Affected, ...]
    references: tuple[str, ...]
    withdrawn: bool
    signed: bool = False  # its feed file carries a signature that verified (and none failed)

    def to_json(self) -> dict[str, Any]:
        """What a report shows of the advisory."""
        return {
            "id": self.id,
            "aliases": list(self.aliases),
            "summary": self.summary,
            "severity": self.severity.name,
            "severity_stated": self.severity_stated,
            "modified": format_time(self.modified),
            "references": list(self.references),
            "source": self.source,
        }


def format_time(when: dt.datetime) -> str:
    """RFC 3339 UTC with a `Z`, as OSV writes it."""
    return when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    text = (importlib.resources.files("dflash_guard.audit") / SCHEMA_RESOURCE).read_text("utf-8")
    schema = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "top level"


def schema_problem(record: Any) -> tuple[str, str] | None:
    """The most relevant schema violation of `record` as (field path, message), or None."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(record))
    if error is None:
        return None
    if list(error.absolute_path) == ["id"] and error.validator == "pattern":
        return "id", (f"{error.instance!r} is not an OSV id: it must start with a known "
                      "database prefix (GHSA-, CVE-, PYSEC-, ...) or x_ for a local database")
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return _path(error.absolute_path), message


def parse_advisory(record: Any, source: str, where: str = "") -> Advisory:
    """Validate one OSV record against the schema and read it; `InputError` names the field."""
    problem = schema_problem(record)
    if problem is not None:
        field, message = problem
        field = f"{where}.{field}" if where and field != "top level" else (where or field)
        raise InputError(f"{source}: {field}: {message}")
    modified = _timestamp(record["modified"])
    severity, stated = advisory_severity(record)
    affected = tuple(_affected(a) for a in record.get("affected") or ())
    return Advisory(
        id=record["id"],
        modified=modified,
        source=source,
        summary=record.get("summary") or record.get("details", "").split("\n", 1)[0],
        aliases=tuple(record.get("aliases") or ()),
        severity=severity,
        severity_stated=stated,
        affected=affected,
        references=tuple(r["url"] for r in record.get("references") or ()),
        withdrawn="withdrawn" in record,
    )


def parse_advisories(document: Any, source: str) -> list[Advisory]:
    """A feed document: one OSV record, or a JSON list of them (as osv.dev's exports)."""
    if isinstance(document, list):
        return [parse_advisory(item, source, f"[{i}]") for i, item in enumerate(document)]
    return [parse_advisory(document, source)]


def _timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.UTC)


def _affected(raw: Mapping[str, Any]) -> Affected:
    package = raw.get("package") or {}
    ranges = tuple(
        Range(
            type=r["type"],
            repo=r.get("repo"),
            events=tuple(Event(kind, value) for e in r["events"] for kind, value in e.items()
                         if kind in ("introduced", "fixed", "last_affected", "limit")),
        )
        for r in raw.get("ranges") or ()
    )
    return Affected(
        ecosystem=package.get("ecosystem"),
        name=package.get("name"),
        purl=package.get("purl"),
        ranges=ranges,
        versions=tuple(raw.get("versions") or ()),
    )


def advisory_severity(record: Mapping[str, Any]) -> tuple[Severity, bool]:
    """(severity, whether the record stated one): GHSA's `database_specific.severity`, else
    an `Ubuntu` severity entry, else `UNRATED_SEVERITY` (CVSS vectors are not scored here)."""
    words = []
    specific = record.get("database_specific")
    if isinstance(specific, Mapping) and isinstance(specific.get("severity"), str):
        words.append(specific["severity"])
    for entry in record.get("severity") or ():
        if entry.get("type") == "Ubuntu":
            words.append(entry.get("score", ""))
    for word in words:
        severity = _SEVERITY_WORDS.get(word.strip().lower())
        if severity is not None:
            return severity, True
    return UNRATED_SEVERITY, False
