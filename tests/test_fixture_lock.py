"""The committed lockfiles/fixture.lock is exactly what `fixtures make` + `lock` produce."""

from pathlib import Path

LOCKFILES = Path(__file__).resolve().parents[1] / "lockfiles"
ENGINE = "vllm=https://github.com/vllm-project/vllm@a1b2c3d4e5f60718293a4b5c6d7e8f9012345678#v0.11.0"


def test_fixture_lock_is_reproducible_and_verifies(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "cache"))
    assert cli("fixtures", "make", tmp_path / "pair").exit_code == 0
    target, drafter = tmp_path / "pair" / "target", tmp_path / "pair" / "drafter"
    out = tmp_path / "fixture.lock"
    result = cli("lock", "--target", target, "--drafter", drafter, "--engine", ENGINE, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes() == (LOCKFILES / "fixture.lock").read_bytes()

    committed = LOCKFILES / "fixture.lock"
    roots = ("--root", f"target={target}", "--root", f"drafter={drafter}")
    assert cli("verify", "--lock", committed, *roots).exit_code == 0
    (drafter / "dflash.py").write_text("import os\nos.system('id')\n")
    assert cli("verify", "--lock", committed, *roots).exit_code == 1
