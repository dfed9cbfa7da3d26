"""The adaptive corpus (`adaptive.py`) scanned on its own: every malicious case names its culprit
in a finding at the default threshold or among the pickle files (which `pickle_allowed: false`
refuses); every benign twin (real published files) has neither."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from tests.scan.adaptive import BENIGN, MALICIOUS, Case


@pytest.mark.parametrize("case", MALICIOUS, ids=lambda c: c.name)
def test_malicious_case_fails_the_scan(tmp_path: Path, case: Case) -> None:
    case.lay(tmp_path)
    report = scan_paths([tmp_path])
    loud = [f for f in report.findings if f.severity >= Severity.high]
    assert any(case.shows_in(f.file) for f in loud) or any(
        case.shows_in(p) for p in report.pickle_files), report.findings


@pytest.mark.parametrize("case", BENIGN, ids=lambda c: c.name)
def test_benign_twin_is_quiet(tmp_path: Path, case: Case) -> None:
    case.lay(tmp_path)
    report = scan_paths([tmp_path])
    assert [f for f in report.findings if f.severity >= Severity.high] == []
    assert report.files_scanned >= 1 and not report.pickle_files
