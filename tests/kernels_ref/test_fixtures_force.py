"""`fixtures make DIR` never deletes an existing DIR/target or DIR/drafter without --force
(issue 15, item 9)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("extra", [(), ("--head-dim", "64"), ("--dflash2",)])
def test_the_pair_is_readable_by_all_whatever_the_umask(cli, tmp_path: Path, extra) -> None:
    """An engine running as another user reads the pair: folders 0755, files 0644 (the
    safetensors writer alone makes 0600)."""
    old = os.umask(0o077)
    try:
        result = cli("fixtures", "make", tmp_path / "pair", *extra)
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.stderr
    for folder in (tmp_path / "pair" / "target", tmp_path / "pair" / "drafter"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
        assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes
