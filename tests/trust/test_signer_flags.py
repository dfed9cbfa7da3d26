"""Newcomer P2 (issue 36): signing the lock must not break the commands that name no signer,
and the operator can name one the way cosign and sigstore users do."""

from __future__ import annotations

import json

from tests.support.trust import make_key_pair, write_lock


def test_a_signature_nobody_asked_to_check_is_unchecked_not_bad(cli, locked_pair, tmp_path):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    private, public = make_key_pair(tmp_path)
    _, other = make_key_pair(tmp_path, "other")
    assert cli("sign", lock, "--key", private).exit_code == 0
    roots = ("--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}")
    plain = cli("verify", "--lock", lock, *roots)
    assert plain.exit_code == 0, plain.stdout
    assert "UNCHECKED SIGNATURE" in plain.stdout and "BAD SIGNATURE" not in plain.stdout
    assert "--public-key" in " ".join(plain.stdout.split())
    mine = cli("verify", "--lock", lock, *roots, "--public-key", public, "--format", "json")
    assert mine.exit_code == 0
    [check] = json.loads(mine.stdout)["signatures"]
    assert check["verdict"] == "passed" and check["signer"].startswith("key key.pub")
    wrong = cli("verify", "--lock", lock, *roots, "--public-key", other)
    assert wrong.exit_code == 1 and "BAD SIGNATURE" in wrong.stdout
    assert cli("verify", "--lock", lock, *roots, "--identity", "me@example.com").exit_code == 2


def test_the_gate_takes_the_operators_signer_and_records_it(cli, locked_pair, tmp_path):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    private, public = make_key_pair(tmp_path)
    assert cli("sign", lock, "--key", private).exit_code == 0
    roots = ("--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}")
    unchecked = cli("gate", "--lock", lock, "--policy", "dev", *roots, "--format", "json")
    assert unchecked.exit_code == 0, unchecked.stdout
    row = json.loads(unchecked.stdout)["checks"][1]
    assert row["name"] == "lockfile signature" and "unchecked" in row["reason"]
    out = tmp_path / "approval.json"
    signed = cli("gate", "--lock", lock, "--policy", "dev", *roots, "--public-key", public,
                 "--output", out, "--format", "json")
    assert signed.exit_code == 0, signed.stdout
    assert json.loads(signed.stdout)["checks"][1]["reason"].startswith("signed by key key.pub")
    rows = json.loads(out.read_text())["predicate"]["checks"]
    evidence = next(r["evidence"] for r in rows if r["name"] == "lockfile signature")
    assert evidence["provenance_trusted"] is True and evidence["signed_by"][0].startswith("key")
