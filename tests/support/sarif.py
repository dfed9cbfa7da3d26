"""What GitHub code scanning needs to place a SARIF 2.1.0 result (the spec's §3.4 and §3.14.14,
checked by hand: the schema is not vendored here): every `uriBaseId` is defined in the run's
`originalUriBaseIds` as an absolute URI ending in `/`, every relative `uri` is a plain path under
it (no `..`, no leading `/`), and a result placed on a file names one that exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlparse


def placed_files(log: dict[str, Any]) -> list[Path]:
    """The file each physical location of `log` resolves to, after checking the rules above."""
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
