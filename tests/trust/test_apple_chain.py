"""The vendored Apple certificates against real ones Apple issued (tests/vectors/apple-codesign):
a Developer ID Application leaf chains to Apple Root CA through the Developer ID intermediate
and passes the Developer ID checks while it was valid; an Apple Development leaf is refused."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from pathlib import Path

import pytest
from cryptography import x509

from dflash_guard.trust.apple import cms
from dflash_guard.trust.apple.image import (
    APPLE_INTERMEDIATES,
    APPLE_ROOTS,
    APPLE_TIMESTAMP,
    _vendored,
)
from dflash_guard.trust.apple.udif import SignatureError

WHILE_VALID = dt.datetime(2022, 1, 1, tzinfo=dt.UTC)


def vector(shared_vectors, name: str) -> x509.Certificate:
    return x509.load_der_x509_certificate((shared_vectors / "apple-codesign" / name).read_bytes())


def test_a_real_developer_id_leaf_chains_to_apples_root(shared_vectors):
    leaf = vector(shared_vectors, "apple-signed-developer-id-application.cer")
    chain = cms.build_chain(leaf, _vendored(APPLE_INTERMEDIATES), _vendored(APPLE_ROOTS))
    assert chain.subjects[1:] == [
        "C=US,O=Apple Inc.,OU=Apple Certification Authority,CN=Developer ID Certification "
        "Authority",
        "CN=Apple Root CA,OU=Apple Certification Authority,O=Apple Inc.,C=US"]
    assert cms.is_developer_id_ca(chain.certificates[1])
    assert cms.code_signing_problem(leaf, apple=True) is None
    assert cms.team_of(leaf) == "MK22MZP987"
    assert cms.chain_problems(chain, WHILE_VALID, "then") == []
    later = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)  # the leaf expired on 2026-04-23
    [expired] = cms.chain_problems(chain, later, "now")
    assert "Developer ID Application: Gregory Szorc (MK22MZP987)" in expired
    assert "is not valid now" in expired


def test_an_apple_development_leaf_is_no_developer_id(shared_vectors):
    leaf = vector(shared_vectors, "apple-signed-apple-development.cer")
    assert cms.code_signing_problem(leaf, apple=True) == (
        f"the signer {leaf.subject.rfc4514_string()} is not a Developer ID Application "
        "certificate (no 1.2.840.113635.100.6.1.13)")
    with pytest.raises(SignatureError, match="does not chain to a trusted root"):
        cms.build_chain(leaf, _vendored(APPLE_INTERMEDIATES), _vendored(APPLE_ROOTS))


def test_the_vendored_certificates_are_the_ones_their_readme_names():
    """Each file's sha256 is the one certs/README.md records beside Apple's URL for it."""
    folder = Path(cms.__file__).parent / "certs"
    readme = (folder / "README.md").read_text()
    names = [*APPLE_ROOTS, *APPLE_INTERMEDIATES, *APPLE_TIMESTAMP]
    assert sorted(p.name for p in folder.glob("*.cer")) == sorted(names)
    for name in names:
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert re.search(rf"^\| {re.escape(name)} \|.*\| {digest} \|$", readme, re.M), name
    for root in _vendored(APPLE_ROOTS):
        assert root.subject == root.issuer
        assert root.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
