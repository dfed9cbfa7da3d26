"""`dflash-guard verify` also checks the lockfile signature and every model.sig."""

from __future__ import annotations

import json

from dflash_guard.trust.signing import sign_with_key
from tests.support.trust import (
    copy_folder,
    flip_signature_byte,
    make_key_pair,
    one_line,
    relock,
    sign_model_folder,
    write_lock,
    write_policy,
)


def _verify(cli, lock, roots, *extra):
    args = ["verify", "--lock", lock, "--format", "json"]
    for role, folder in roots.items():
        args += ["--root", f"{role}={folder}"]
    return cli(*args, *extra)


def _keys_policy(tmp_path, section, public, *more):
    return write_policy(tmp_path / "policy", (f"{section}: {{identities: [], public_keys: []}}",
                                              f"{section}: {{identities: [], public_keys: "
                                              f"[{public}]}}"), *more)


def test_signing_verify_unsigned_lock_passes_without_policy(cli, locked_pair, tmp_path):
    result = _verify(cli, write_lock(locked_pair.lock, tmp_path / "dflash.lock"), locked_pair.roots)
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)["signatures"] == []


def test_signing_verify_checks_a_present_lock_signature(cli, locked_pair, tmp_path):
    private, public = make_key_pair(tmp_path)
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    sig = sign_with_key(lock, private)
    policy = _keys_policy(tmp_path, "lockfile", public)
    good = _verify(cli, lock, locked_pair.roots, "--policy", policy)
    assert good.exit_code == 0
    [check] = json.loads(good.stdout)["signatures"]
    assert check["passed"] and check["signer"].startswith("key key.pub")
    # Without a policy naming the key, a present signature proves nothing: unchecked, neither
    # trusted nor a refusal (issue 36: signing the lock broke every command naming no key).
    unchecked = _verify(cli, lock, locked_pair.roots)
    assert unchecked.exit_code == 0
    [check] = json.loads(unchecked.stdout)["signatures"]
    assert check["verdict"] == "skipped" and check["signer"] is None
    sig.write_bytes(flip_signature_byte(sig.read_bytes()))
    bad = cli("verify", "--lock", lock, "--root", f"target={locked_pair.target}", "--root",
              f"drafter={locked_pair.drafter}", "--policy", policy)
    assert bad.exit_code == 1 and "BAD SIGNATURE: dflash.lock" in one_line(bad.stdout)


def test_signing_verify_requires_lock_signature_when_policy_does(cli, locked_pair, tmp_path):
    _, public = make_key_pair(tmp_path)
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    policy = _keys_policy(tmp_path, "lockfile", public,
                          ("lockfile_required: false", "lockfile_required: true"))
    result = _verify(cli, lock, locked_pair.roots, "--policy", policy)
    assert result.exit_code == 1
    assert "requires a signed lockfile" in json.loads(result.stdout)["signatures"][0]["reason"]


def test_signing_verify_checks_model_sig_against_the_lock(cli, locked_pair, tmp_path):
    private, public = make_key_pair(tmp_path)
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    sign_model_folder(drafter, private)
    roots = {"target": locked_pair.target, "drafter": drafter}
    lock = write_lock(relock(locked_pair, drafter), tmp_path / "dflash.lock")
    policy = _keys_policy(tmp_path, "models", public)
    good = _verify(cli, lock, roots, "--policy", policy)
    assert good.exit_code == 0, good.stdout
    assert json.loads(good.stdout)["signatures"][0]["subject"] == "drafter"
    config = drafter / "config.json"
    config.write_text(config.read_text() + " ")
    # the lock matches the disk...
    lock = write_lock(relock(locked_pair, drafter), tmp_path / "dflash.lock")
    bad = _verify(cli, lock, roots, "--policy", policy)
    assert bad.exit_code == 1  # ...but not the signature
    assert "config.json" in json.loads(bad.stdout)["signatures"][0]["reason"]
