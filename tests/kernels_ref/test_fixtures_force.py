"""`fixtures make DIR` never deletes an existing DIR/target or DIR/drafter without --force
(issue 15, item 9)."""

from __future__ import annotations

from pathlib import Path

from tests.support.hostile import one_line_error


def test_fixtures_make_refuses_to_overwrite_without_force(cli, tmp_path: Path) -> None:
    mine = tmp_path / "pair" / "target"
    mine.mkdir(parents=True)
    (mine / "my-model.safetensors").write_bytes(b"months of training")
    message = one_line_error(cli("fixtures", "make", tmp_path / "pair"))
    assert "target" in message and "--force" in message
    assert (mine / "my-model.safetensors").read_bytes() == b"months of training"
    assert not (tmp_path / "pair" / "drafter").exists()


def test_fixtures_make_refuses_an_existing_drafter_too(cli, tmp_path: Path) -> None:
    (tmp_path / "pair" / "drafter").mkdir(parents=True)
    assert "drafter" in one_line_error(cli("fixtures", "make", tmp_path / "pair"))


def test_fixtures_make_force_rewrites_both(cli, tmp_path: Path) -> None:
    mine = tmp_path / "pair" / "target"
    mine.mkdir(parents=True)
    (mine / "stale.bin").write_bytes(b"old")
    result = cli("fixtures", "make", tmp_path / "pair", "--force")
    assert result.exit_code == 0, result.stderr
    assert not (mine / "stale.bin").exists()
    assert (mine / "model.safetensors").is_file()
