"""Key-based signing (air-gapped sites) and keyless signing's refusal without a credential."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.trust.policy import Identity, Signers
from dflash_guard.trust.signing import (
    lock_signature_paths,
    sign_keyless,
    sign_with_key,
    verify_lockfile_signature,
)
from tests.support.trust import flip_byte, make_key_pair, one_line

CI_VARIABLES = ("GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "CIRCLECI",
                "GOOGLE_SERVICE_ACCOUNT_NAME")


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    path = tmp_path / "dflash.lock"
    path.write_text("lockfile_version: 1\nartifacts: []\n")
    return path


def test_signing_key_roundtrip(cli, lock, key_pair):
    private, public = key_pair
    result = cli("sign", lock, "--key", private)
    assert result.exit_code == 0
    _, sig = lock_signature_paths(lock)
    assert sig.is_file()
    [check] = verify_lockfile_signature(lock, Signers((), (public,)), required=True)
    assert check.ok and check.signer.startswith("key key.pub")


def test_signing_key_rejects_changed_lockfile(lock, key_pair):
    private, public = key_pair
    sign_with_key(lock, private)
    flip_byte(lock, 3)
    [check] = verify_lockfile_signature(lock, Signers((), (public,)), required=True)
    assert not check.ok and "changed since it was signed" in check.reason


def test_signing_key_rejects_other_key(lock, key_pair, tmp_path):
    private, _ = key_pair
    sign_with_key(lock, private)
    _, other = make_key_pair(tmp_path, "other")
    [check] = verify_lockfile_signature(lock, Signers((), (other,)), required=True)
    assert not check.ok and "does not verify with this key" in check.reason


def test_signing_key_signature_needs_an_accepted_key(lock, key_pair):
    sign_with_key(lock, key_pair[0])
    only_identities = Signers((Identity("a@example.com", "https://accounts.google.com"),), ())
    [check] = verify_lockfile_signature(lock, only_identities, required=False)
    assert not check.ok and "accepts no public key" in check.reason


def test_signing_missing_signature_refused_only_when_required(lock, key_pair):
    signers = Signers((), (key_pair[1],))
    assert verify_lockfile_signature(lock, signers, required=False) == []
    [check] = verify_lockfile_signature(lock, signers, required=True)
    assert not check.ok and "requires a signed lockfile" in check.reason


def test_signing_key_bad_private_key_is_input_error(lock, tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    with pytest.raises(InputError, match="cannot sign"):
        sign_with_key(lock, bad)
    assert not lock_signature_paths(lock)[1].exists()


def test_signing_keyless_without_credential_is_a_clear_error(cli, lock, monkeypatch):
    """No ambient credential and no terminal: a one-line error, never a fake signature."""
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InputError, match="no ambient OIDC credential"):
        sign_keyless(lock, interactive=False)
    result = cli("sign", lock, "--no-interactive")
    assert result.exit_code == 2
    assert "no ambient OIDC credential" in one_line(result.stderr)
    assert not lock_signature_paths(lock)[0].exists()


def test_signing_missing_lockfile_is_input_error(cli, tmp_path, key_pair):
    result = cli("sign", tmp_path / "nope.lock", "--key", key_pair[0])
    assert result.exit_code == 2 and "no such file" in one_line(result.stderr)
