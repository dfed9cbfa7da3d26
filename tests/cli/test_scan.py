"""`dflash-guard scan`: exit codes, JSON schema, SARIF, --output, --fail-on."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.scan_builders import (
    BENIGN_MODELING,
    gadget_pickle,
    make_pair,
    write_safetensors,
)


def test_clean_folder_exits_0(cli, tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model.safetensors")
    result = cli("scan", tmp_path)
    assert result.exit_code == 0, result.stdout
    assert "PASS" in result.stdout


def test_finding_exits_1_and_fail_on_raises_the_bar(cli, tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(gadget_pickle("vendor_mod", "thing", protocol=2))
    assert cli("scan", tmp_path).exit_code == 1
    assert cli("scan", tmp_path, "--fail-on", "critical").exit_code == 0
    assert cli("scan", tmp_path, "--fail-on", "high").exit_code == 1


def test_low_notes_fail_only_with_fail_on_low(cli, tmp_path: Path) -> None:
    (tmp_path / "dflash.py").write_text(BENIGN_MODELING)
    assert cli("scan", tmp_path).exit_code == 0
    assert cli("scan", tmp_path, "--fail-on", "low").exit_code == 1


def test_usage_errors_exit_2(cli, tmp_path: Path) -> None:
    missing = cli("scan", tmp_path / "nope")
    assert missing.exit_code == 2 and "no such" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert cli("scan", tmp_path, "--fail-on", "severe").exit_code == 2
    assert cli("scan", tmp_path, "--format", "xml").exit_code == 2
    assert cli("scan", tmp_path, "--target", tmp_path / "nope").exit_code == 2


def test_json_schema(cli, tmp_path: Path) -> None:
    target, drafter = make_pair(
        tmp_path, drafter={"dflash_config": {"mask_token_id": 2, "target_layer_ids": [1]}}
    )
    (drafter / "extra.pkl").write_bytes(gadget_pickle("os", "system", protocol=0))
    result = cli("scan", drafter, "--target", target, "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert set(report) == {
        "tool",
        "version",
        "fail_on",
        "passed",
        "findings",
        "summary",
        "remote_code",
        "pickle_files",
        "param_count",
        "engines",
        "every_engine",
        "loaded_files",
        "not_loaded_files",
    }
    assert report["every_engine"] is True and report["not_loaded_files"] == []
    assert "extra.pkl" in report["loaded_files"]
    assert report["tool"] == "dflash-guard" and report["fail_on"] == "medium"
    assert report["pickle_files"] == ["extra.pkl"]
    assert report["param_count"] == 64 + 64 * 64  # one layer norm, fc from one target layer
    assert report["passed"] is False
    assert report["summary"]["by_severity"]["critical"] >= 1
    finding = report["findings"][0]
    assert set(finding) == {"rule_id", "severity", "file", "message", "line", "member", "detector",
                            "repo"}
    assert {f["rule_id"] for f in report["findings"]} >= {
        "DG-DRAFTER-MASK",
        "DG-PICKLE-DANGEROUS-GLOBAL",
    }


def test_sarif_and_atomic_output(cli, tmp_path: Path, monkeypatch) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "modeling.py").write_text("import os\nos.system('id')\n")
    out = tmp_path / "report.sarif"
    monkeypatch.chdir(tmp_path)
    result = cli("scan", "model", "--format", "sarif", "--output", out)
    assert result.exit_code == 1 and result.stdout == ""
    sarif = json.loads(out.read_text())
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    rule_ids = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    assert "DG-RC-PROCESS" in rule_ids
    result0 = next(r for r in run["results"] if r["ruleId"] == "DG-RC-PROCESS")
    assert result0["level"] == "error"
    location = result0["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "model/modeling.py", "uriBaseId": "SRCROOT"}
    assert location["region"]["startLine"] == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_text_report_to_file(cli, tmp_path: Path) -> None:
    (tmp_path / "m.pkl").write_bytes(gadget_pickle("os", "system", protocol=2))
    out = tmp_path / "report.txt"
    assert cli("scan", tmp_path / "m.pkl", "--output", out).exit_code == 1
    text = out.read_text()
    assert "DG-PICKLE-DANGEROUS-GLOBAL" in text
    assert "FAIL: 1 file, " in text and " findings (worst: critical" in text


def test_text_verdict_counts_in_the_singular(cli, tmp_path: Path) -> None:
    (tmp_path / "dflash.py").write_text(BENIGN_MODELING)  # one note: DG-RC-UNREVIEWED
    result = cli("scan", tmp_path)
    assert "PASS: 1 file, 1 finding (worst: low" in result.stdout


def test_unwritable_output_is_an_input_error(cli, tmp_path: Path) -> None:
    (tmp_path / "m.pkl").write_bytes(gadget_pickle("os", "system", protocol=2))
    for output in (tmp_path / "missing" / "r.json", tmp_path):
        result = cli("scan", tmp_path / "m.pkl", "--format", "json", "--output", output)
        assert result.exit_code == 2 and "cannot write the report" in result.stderr
        assert "internal error" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pkl"]


def test_scan_writes_nothing_but_its_output(
    cli, tmp_path: Path, monkeypatch
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    write_safetensors(model / "model.safetensors")
    # not a file vLLM's weight selection drops (a pytorch_model.bin would be): loaded
    (model / "extra.pkl").write_bytes(gadget_pickle("os", "system", protocol=2))
    (model / "modeling_dflash.py").write_text(BENIGN_MODELING)
    (model / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)

    def snapshot() -> dict[str, tuple[bytes, int]]:
        return {
            str(p.relative_to(tmp_path)): (
                p.read_bytes() if p.is_file() else b"",
                p.stat().st_mtime_ns,
            )
            for p in tmp_path.rglob("*")
        }

    before = snapshot()
    assert cli("scan", model, "--format", "sarif", "--output", tmp_path / "r.sarif").exit_code == 1
    after = snapshot()
    assert after.pop("r.sarif") and after == before


def test_text_report_prints_markup_like_names_verbatim(cli, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    (folder / "w[").mkdir(parents=True)
    (folder / "w[" / "b].py").write_text('import os\nos.system("id")\n')
    result = cli("scan", folder)
    assert result.exit_code == 1, result.stderr
    assert "w[/b].py" in result.stdout
    assert "internal error" not in result.stderr


def test_two_folders_with_one_name_keep_their_own_findings(cli, tmp_path: Path, monkeypatch,
                                                           builtin_pair) -> None:
    """Newcomer P3, typed as the user typed it: `scan models/a/drafter models/b/drafter` with
    b's weights truncated puts b's findings on b's files, and keeps each folder's own code
    finding (they used to merge into a's)."""
    import shutil

    from tests.support.sarif import placed_files

    for name in ("a", "b"):
        shutil.copytree(builtin_pair.drafter, tmp_path / "models" / name / "drafter")
    weights = tmp_path / "models" / "b" / "drafter" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    monkeypatch.chdir(tmp_path)
    result = cli("scan", "models/a/drafter", "models/b/drafter", "--format", "sarif", "-q")
    assert result.exit_code == 1
    log = json.loads(result.stdout)
    where = {(r["ruleId"], path.relative_to(tmp_path.resolve()).as_posix())
             for r, path in zip(log["runs"][0]["results"], placed_files(log), strict=True)}
    assert ("DG-ST-LENGTH", "models/b/drafter/model.safetensors") in where
    assert ("DG-RC-UNREVIEWED", "models/a/drafter/dflash.py") in where
    assert ("DG-RC-UNREVIEWED", "models/b/drafter/dflash.py") in where
    assert not any(rule != "DG-RC-UNREVIEWED" and path.startswith("models/a/")
                   for rule, path in where)
    shown = json.loads(cli("scan", "models/a/drafter", "models/b/drafter", "--format", "json",
                           "-q").stdout)  # the text table's `where`, unwrapped
    files = {f["file"] for f in shown["findings"]}
    assert {"b/drafter/model.safetensors", "a/drafter/dflash.py", "b/drafter/dflash.py"} <= files
