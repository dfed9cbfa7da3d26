"""Checks for the SARIF logs the tool writes: the OASIS SARIF 2.1.0 schema (vendored in
tests/vectors/sarif), GitHub code scanning's documented ingestion rules written as checks
(`github_problems`), and where each result lands (`placed_files`)."""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlparse

import jsonschema

# RFC 3986 §4.2: a relative-ref with no authority, query or fragment is a first segment of
# pchar without ":" (else it reads as a scheme), then "/" and pchar; pchar is unreserved,
# pct-encoded, sub-delims, ":" and "@". A space, "#", "?" or non-ASCII must be %-encoded.
_FIRST = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|%[0-9A-Fa-f]{2})+"
_REST = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=@:/]|%[0-9A-Fa-f]{2})*"
_RELATIVE_REF = re.compile(rf"^{_FIRST}(?:/{_REST})?$")
SCHEMA = Path(__file__).parents[1] / "vectors" / "sarif" / "sarif-schema-2.1.0.json"


@functools.cache
def _validator() -> jsonschema.Draft4Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return jsonschema.Draft4Validator(schema)


def schema_problems(log: dict[str, Any]) -> list[str]:
    """Every place `log` breaks the OASIS SARIF 2.1.0 schema."""
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in _validator().iter_errors(log)]


def _security_severity(value: object) -> bool:
    try:
        return isinstance(value, str) and 0.0 <= float(value) <= 10.0
    except ValueError:
        return False


def github_problems(log: dict[str, Any]) -> list[str]:  # noqa: C901 - one check per rule
    """GitHub code scanning's ingestion rules (docs.github.com, "SARIF support for code
    scanning", and the SARIF Multitool's GH* rules), as checks; an empty list passes."""
    problems: list[str] = []
    text = json.dumps(log).encode()
    if len(gzip.compress(text)) > 10 * 1024 * 1024:
        problems.append("over 10 MB gzipped")
    if log.get("version") != "2.1.0" or "$schema" not in log:
        problems.append("version 2.1.0 and $schema are required")
    runs = log.get("runs", [])
    if not 1 <= len(runs) <= 20:
        problems.append(f"{len(runs)} runs (1 to 20)")
    for r, run in enumerate(runs):
        driver = run["tool"]["driver"]
        where = f"runs[{r}]"
        for key in ("name", "semanticVersion", "informationUri"):
            if not driver.get(key):
                problems.append(f"{where}.tool.driver: no {key}")
        rules = driver.get("rules", [])
        if len(rules) > 25_000:
            problems.append(f"{where}: over 25,000 rules")
        ids = [rule["id"] for rule in rules]
        if len(ids) != len(set(ids)):
            problems.append(f"{where}: duplicate rule ids")
        for i, rule in enumerate(rules):
            at = f"{where}.rules[{i}] {rule['id']}"
            for key in ("shortDescription", "fullDescription", "help"):  # GH2012 and the docs
                if not rule.get(key, {}).get("text"):
                    problems.append(f"{at}: no {key}.text")
            properties = rule.get("properties", {})
            if not _security_severity(properties.get("security-severity")):
                problems.append(f"{at}: security-severity is not a number 0.0-10.0")
            if len(properties.get("tags", [])) > 20:
                problems.append(f"{at}: over 20 tags")
            if rule.get("defaultConfiguration", {}).get("level") not in ("error", "warning",
                                                                         "note"):
                problems.append(f"{at}: no default level")
        bases = run.get("originalUriBaseIds", {})
        for name, base in bases.items():
            if urlparse(base["uri"]).scheme != "file" or not base["uri"].endswith("/"):
                problems.append(f"{where}: base {name} is not an absolute file: URI ending in /")
        results = run.get("results", [])
        if len(results) > 25_000:
            problems.append(f"{where}: over 25,000 results")
        for j, result in enumerate(results):
            at = f"{where}.results[{j}]"
            if "properties" in result and "security-severity" in result["properties"]:
                problems.append(f"{at}: security-severity on a result (GitHub reads the rule's)")
            if result.get("ruleId") not in ids or ids.index(result["ruleId"]) != result.get(
                    "ruleIndex"):
                problems.append(f"{at}: ruleId/ruleIndex do not name one of the run's rules")
            if not result.get("message", {}).get("text"):
                problems.append(f"{at}: no message.text")
            if not result.get("partialFingerprints"):
                problems.append(f"{at}: no partialFingerprints")
            locations = result.get("locations", [])
            if not 1 <= len(locations) <= 1000:
                problems.append(f"{at}: {len(locations)} locations (1 to 1000)")
            for location in locations:
                artifact = location.get("physicalLocation", {}).get("artifactLocation")
                if not artifact or not artifact.get("uri"):  # locationFromSarifResult
                    problems.append(f"{at}: a location with no physicalLocation.artifactLocation")
                    continue
                uri = artifact["uri"]
                if urlparse(uri).scheme:
                    problems.append(f"{at}: {uri!r} is absolute (relative to a base wanted)")
                elif not _RELATIVE_REF.match(uri):  # SARIF1002; a "#" would cut the path
                    problems.append(f"{at}: {uri!r} is not percent-encoded (RFC 3986)")
                elif artifact.get("uriBaseId") not in bases:
                    problems.append(f"{at}: uriBaseId {artifact.get('uriBaseId')!r} undeclared")
                region = location["physicalLocation"].get("region")
                if region is not None and region.get("startLine", 0) < 1:
                    problems.append(f"{at}: a region without a startLine >= 1")
    return problems


def placed_files(log: dict[str, Any]) -> list[Path]:
    """The file each physical location of `log` resolves to, after checking that every
    `uriBaseId` is declared as an absolute `file:` URI ending in `/`, every relative `uri` is a
    plain path under it (no `..`, no leading `/`), and the file exists."""
    [run] = log["runs"]
    bases = run.get("originalUriBaseIds", {})
    for base in bases.values():
        assert urlparse(base["uri"]).scheme == "file" and base["uri"].endswith("/"), base
    files = []
    for result in run["results"]:
        for location in result["locations"]:
            if "physicalLocation" not in location:
                continue
            artifact = location["physicalLocation"]["artifactLocation"]
            uri = artifact["uri"]
            if "uriBaseId" in artifact:
                assert artifact["uriBaseId"] in bases, artifact
                assert not uri.startswith("/") and ".." not in Path(uri).parts, uri
                uri = urljoin(bases[artifact["uriBaseId"]]["uri"], uri)
            parsed = urlparse(uri)
            assert parsed.scheme == "file", uri
            path = Path(unquote(parsed.path))
            assert path.is_file(), path
            files.append(path)
    return files
