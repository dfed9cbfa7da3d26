"""The benign real-world corpus (`tests/scan/corpus/`): published remote code, chat templates and
drafter configs get no finding at or above `medium` (DG-RC-UNREVIEWED and other lows are fine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity

CORPUS = Path(__file__).parent / "corpus"
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text())


def test_manifest_is_complete_and_large_enough() -> None:
    files = {entry["file"] for entry in MANIFEST}
    assert len(files) >= 40
    assert sum(f.endswith(".jinja") or "chat_template" in (CORPUS / f).read_text(errors="replace")
               for f in files) >= 25
    for entry in MANIFEST:
        assert (CORPUS / entry["file"]).is_file(), entry["file"]
        assert entry["repository"] and entry["path"] and entry["commit"] and entry["license"]


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_published_file_has_no_medium_finding(entry: dict) -> None:
    path = CORPUS / entry["file"]
    is_drafter = entry["file"].startswith("drafter_configs/")
    report = scan_paths([path.parent if is_drafter else path])
    loud = [f for f in report.findings if f.severity >= Severity.medium]
    assert loud == []
    if path.suffix == ".py":  # it was analysed, not skipped: the review note is there
        assert [f.rule_id for f in report.findings if f.rule_id == "DG-RC-UNREVIEWED"]
