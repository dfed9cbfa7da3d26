"""SARIF that code scanning can place: file locations relative to `SRCROOT` (the working folder,
defined in `originalUriBaseIds`), whichever folder was scanned and however many; `launch --check`
findings about flags are logical locations (never a file called `--host`) on the lockfile. The
whole-log checks (schema, GitHub's rules) are in test_sarif_github.py."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support import vllm
from tests.support.sarif import placed_files
from tests.support.trust import write_lock


@pytest.mark.parametrize("scanned", [["models/drafter"], ["models"],
                                     ["models/drafter", "models/target"],
                                     ["models/drafter/dflash.py"]])
def test_scan_results_resolve_to_the_scanned_files(cli, tmp_path, monkeypatch, builtin_pair,
                                                   scanned):
    shutil.copytree(builtin_pair.drafter, tmp_path / "models" / "drafter")
    shutil.copytree(builtin_pair.target, tmp_path / "models" / "target")
    monkeypatch.chdir(tmp_path)
    result = cli("scan", *scanned, "--format", "sarif", "-q")
    log = json.loads(result.stdout)
    base = log["runs"][0]["originalUriBaseIds"]["SRCROOT"]["uri"]
    assert base == tmp_path.resolve().as_uri() + "/"
    placed = placed_files(log)
    assert tmp_path.resolve() / "models" / "drafter" / "dflash.py" in placed
    for location in (r["locations"][0] for r in log["runs"][0]["results"]):
        artifact = location["physicalLocation"]["artifactLocation"]
        assert artifact["uriBaseId"] == "SRCROOT" and artifact["uri"].startswith("models/")


def test_launch_check_flags_are_logical_locations_on_the_lockfile(cli, tmp_path, locked_pair,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = cli("launch", "--check", "vllm", "--lock", "dflash.lock", "--format", "sarif",
                 "--program", vllm.install(), "--",
                 "vllm", "serve", "Qwen/Qwen3-8B", "--host", "0.0.0.0")
    assert result.exit_code == 1
    log = json.loads(result.stdout)
    locations = [r["locations"] for r in log["runs"][0]["results"]]
    assert {"--host", "--model"} <= {loc["logicalLocations"][0]["name"]
                                     for [loc] in locations}
    assert placed_files(log) == [tmp_path.resolve() / "dflash.lock"] * len(locations)
