"""JSON the scan parses (configs, shard indexes, safetensors headers): too deep or too big is a
finding, never a crash."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from dflash_guard import fileio
from dflash_guard.scan import scan_paths

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("config.json", "DG-CONFIG-INVALID"),
        ("tokenizer_config.json", "DG-CONFIG-INVALID"),
        ("model.safetensors.index.json", "DG-ST-INDEX"),
    ],
)
def test_deeply_nested_json_file_is_a_finding(tmp_path: Path, name: str, rule: str) -> None:
    (tmp_path / name).write_text(DEEP)
    findings = scan_paths([tmp_path]).findings
    assert any(f.rule_id == rule and "nested too deeply" in f.message for f in findings)


def test_deeply_nested_safetensors_header_is_a_finding(tmp_path: Path) -> None:
    header = DEEP.encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    findings = scan_paths([tmp_path]).findings
    assert [(f.rule_id, "nested too deeply" in f.message) for f in findings] == [
        ("DG-FORMAT-UNKNOWN", False), ("DG-ST-HEADER", True)
    ]


def test_json_file_over_the_size_limit_is_not_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fileio, "MAX_JSON_BYTES", 64)
    (tmp_path / "config.json").write_text('{"architectures": ["DFlashDraftModel"]}' + " " * 64)
    findings = scan_paths([tmp_path]).findings
    assert any(f.rule_id == "DG-CONFIG-INVALID" and "larger than 64 bytes" in f.message
               for f in findings)


def test_cli_reports_a_deep_config_without_an_internal_error(cli, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(DEEP)
    result = cli("scan", tmp_path, "--format", "json")
    assert result.exit_code == 1 and "internal error" not in result.stderr
