"""Issue 15 item 10: no output replaces an input (exit 2, the input left as it was)."""

from __future__ import annotations

import pytest

from tests.support.trust import make_key_pair, write_lock, write_policy


@pytest.fixture
def gate_inputs(locked_pair, tmp_path):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    policy = write_policy(tmp_path / "policy")
    roots = ("--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}")
    return lock, policy, roots


@pytest.mark.parametrize("which", ["lock", "policy", "link to lock", "lock signature"])
def test_gate_out_cannot_be_an_input(cli, gate_inputs, tmp_path, which):
    lock, policy, roots = gate_inputs
    out = {"lock": lock, "policy": policy, "link to lock": tmp_path / "link.json",
           "lock signature": tmp_path / "dflash.lock.sig"}[which]
    if which == "link to lock":
        out.symlink_to(lock)
    if which == "lock signature":
        out.write_text("sig")
    before = {p: p.read_bytes() for p in (lock, policy)}
    r = cli("gate", "--lock", lock, "--policy", policy, *roots, "--output", out)
    assert r.exit_code == 2 and "refusing to overwrite an input" in " ".join(r.stderr.split())
    assert {p: p.read_bytes() for p in before} == before


def test_gate_signature_output_cannot_be_the_lock(cli, gate_inputs, tmp_path):
    lock, policy, roots = gate_inputs
    private, _ = make_key_pair(tmp_path)
    out = tmp_path / "dflash"  # the key signature would be dflash.sig ...
    lock_named = tmp_path / "dflash.sig"  # ... which is the lockfile here
    lock_named.write_bytes(lock.read_bytes())
    r = cli("gate", "--lock", lock_named, "--policy", policy, *roots, "--output", out,
            "--key", private)
    assert r.exit_code == 2 and "signature" in r.stderr


def test_gate_out_inside_a_verified_folder_is_refused(cli, gate_inputs, locked_pair):
    lock, policy, roots = gate_inputs
    r = cli("gate", "--lock", lock, "--policy", policy, *roots,
            "--output", locked_pair.drafter / "approval.json")
    assert r.exit_code == 2 and "inside the input folder" in r.stderr
    assert not (locked_pair.drafter / "approval.json").exists()


def test_lock_output_cannot_be_a_source_or_a_wheel(cli, locked_pair, tmp_path):
    wheel = tmp_path / "six-1.17.0-py2.py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    r = cli("lock", "--target", locked_pair.target, "--drafter", locked_pair.drafter,
            "--package", wheel, "-o", wheel)
    assert r.exit_code == 2 and wheel.read_bytes() == b"wheel"
    r = cli("lock", "--target", locked_pair.target, "--drafter", locked_pair.drafter,
            "-o", locked_pair.target / "dflash.lock")
    assert r.exit_code == 2 and not (locked_pair.target / "dflash.lock").exists()


def test_export_requirements_cannot_overwrite_its_lock(cli, gate_inputs):
    lock, _, _ = gate_inputs
    before = lock.read_bytes()
    r = cli("export", "requirements", "--lock", lock, "-o", lock)
    assert r.exit_code == 2 and lock.read_bytes() == before
