"""`verify-app`'s verifier on disk images rcodesign signed (tests/support/apple.py): a test
chain under a policy that trusts it and pins its team verifies; a changed byte, another team,
an expired or non-code-signing leaf, Apple's roots alone, an unbound alternate code directory
each fail with their reason; what our parser reads is what rcodesign reads."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import struct
from pathlib import Path

import apple_platform
import pytest
from apple_platform.reading import find_values
from cryptography.x509.oid import ExtendedKeyUsageOID

from dflash_guard.errors import InputError
from dflash_guard.trust.apple.image import AppPins, verify_image
from tests.support.apple import (
    DAY,
    IDENTIFIER,
    NOW,
    TEAM,
    make_chain,
    signed_image,
    staple,
    unsigned_image,
)
from tests.support.apple_tsa import LocalTsa, serving


@pytest.fixture(scope="module")
def signed(tmp_path_factory) -> tuple[Path, AppPins]:
    folder = tmp_path_factory.mktemp("signed")
    chain = make_chain(folder)
    return signed_image(folder, chain), AppPins(team_id=TEAM, identifier=IDENTIFIER,
                                                roots=(chain.root,))


def copy_with(image: Path, out: Path, offset: int, value: bytes) -> Path:
    data = bytearray(image.read_bytes())
    data[offset:offset + len(value)] = value
    out.write_bytes(bytes(data))
    return out


def test_a_test_chain_image_verifies_under_a_policy_trusting_it(signed):
    image, pins = signed
    check = verify_image(image, pins)
    assert check.passed, check.problems
    assert (check.team_id, check.identifier, check.anchor) == (TEAM, IDENTIFIER, "policy")
    assert check.sha256 == hashlib.sha256(image.read_bytes()).hexdigest()
    assert check.ticket is None and len(check.chain) == 2
    assert check.timestamp_token is False  # signed with timestamp_url="none"


def test_what_we_read_is_what_rcodesign_reads(signed):
    image, pins = signed
    check = verify_image(image, pins)
    entities = apple_platform.read_signature(image)
    [directory] = [b for b in find_values(entities, "blobs")[0]
                   if b["slot"] == "CodeDirectory (0)"]
    assert check.code_directories == (("sha256", directory["sha256"]),)
    assert apple_platform.code_directory_identifier(entities) == check.identifier
    assert find_values(entities, "apple_team_id") == [check.team_id]
    [signer] = find_values(entities, "signers")[0]
    assert signer["message_digest"] == directory["sha256"] and signer["signature_verifies"]
    [(_, digest)] = signer["cdhash_digests"]
    assert digest == check.code_directories[0][1]


@pytest.mark.parametrize("where", ["start", "middle", "property list"])
def test_one_flipped_byte_of_the_image_fails(signed, tmp_path, where):
    image, pins = signed
    data = image.read_bytes()
    plist_offset, = struct.unpack_from(">Q", data, len(data) - 512 + 216)
    offset = {"start": 0, "middle": plist_offset // 2, "property list": plist_offset + 3}[where]
    tampered = copy_with(image, tmp_path / "t.dmg", offset, bytes([data[offset] ^ 1]))
    check = verify_image(tampered, pins)
    assert not check.passed
    assert check.problems == ("code directory 0x0 (sha256): the image's digest differs from "
                              "the signed one (the image was changed after signing)",)


def test_a_changed_trailer_fails(signed, tmp_path):
    image, pins = signed
    size = image.stat().st_size
    tampered = copy_with(image, tmp_path / "t.dmg", size - 512 + 8 * 60, b"\x01")  # sectors
    check = verify_image(tampered, pins)
    assert any("trailer's digest (slot 6) differs" in p for p in check.problems), check.problems


def test_a_changed_code_directory_fails_the_cms_signature(signed, tmp_path):
    image, pins = signed
    data = image.read_bytes()
    identifier = data.rindex(IDENTIFIER.encode())
    tampered = copy_with(image, tmp_path / "t.dmg", identifier, b"X")
    check = verify_image(tampered, pins)
    assert check.problems == ("the CMS signature is over another code directory "
                              "(messageDigest differs)",)


def test_another_team_fails(signed):
    image, pins = signed
    check = verify_image(image, dataclasses.replace(pins, team_id="OTHERTEAM1"))
    assert check.problems == ("the signer's team is TEAM123456, the policy pins OTHERTEAM1",)


def test_no_team_pinned_fails(signed):
    image, pins = signed
    check = verify_image(image, dataclasses.replace(pins, team_id=None))
    assert check.problems == ("the policy pins no team for this app (engines.omlx.team_id)",)


def test_another_identifier_fails(signed):
    image, pins = signed
    check = verify_image(image, dataclasses.replace(pins, identifier="com.example.other"))
    assert check.problems == (f"the image's identifier is {IDENTIFIER}, the policy pins "
                              "com.example.other",)


def test_apples_roots_alone_refuse_a_test_chain(signed):
    image, pins = signed
    check = verify_image(image, dataclasses.replace(pins, roots=()))
    assert not check.passed and check.anchor is None
    assert any("does not chain to a trusted root (issuer CN=dflash-guard test root not "
               "trusted)" in p for p in check.problems), check.problems


def test_another_root_refuses_the_image(signed, tmp_path):
    image, pins = signed
    other = make_chain(tmp_path / "other")
    check = verify_image(image, dataclasses.replace(pins, roots=(other.root,)))
    assert any("does not chain to a trusted root" in p for p in check.problems)


def test_a_leaf_expired_when_it_signed_fails(tmp_path):
    chain = make_chain(tmp_path, not_before=NOW - 60 * DAY, not_after=NOW - 30 * DAY)
    check = verify_image(signed_image(tmp_path, chain), AppPins(TEAM, roots=(chain.root,)))
    assert len(check.problems) == 2, check.problems
    assert "is not valid at the signing time" in check.problems[0]
    assert "is not valid now" in check.problems[1]


def test_a_leaf_expired_since_it_signed_fails_too(tmp_path):
    """Without a verified timestamp the signing time is the signer's word: validity is also
    required now (docs/limits.md)."""
    chain = make_chain(tmp_path, not_before=NOW - 60 * DAY, not_after=NOW - 30 * DAY)
    image = signed_image(tmp_path, chain, signing_time=NOW - 40 * DAY)
    check = verify_image(image, AppPins(TEAM, roots=(chain.root,)))
    assert len(check.problems) == 1 and "is not valid now" in check.problems[0]


def test_a_signing_time_in_the_future_fails(tmp_path):
    chain = make_chain(tmp_path)
    image = signed_image(tmp_path, chain, signing_time=NOW + 10 * DAY)
    check = verify_image(image, AppPins(TEAM, roots=(chain.root,)))
    assert any("is in the future" in p for p in check.problems), check.problems


def test_a_non_code_signing_leaf_fails(tmp_path):
    chain = make_chain(tmp_path, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    check = verify_image(signed_image(tmp_path, chain), AppPins(TEAM, roots=(chain.root,)))
    assert check.problems == ("the signer OU=TEAM123456,CN=Developer ID Application: Test "
                              "(TEAM123456) is not a code-signing certificate (no codeSigning "
                              "usage)",)


def test_a_stapled_ticket_is_reported(signed, tmp_path):
    image, pins = signed
    cdhash = bytes.fromhex(verify_image(image, pins).code_directories[0][1])[:20]
    stapled = staple(image, b"s8ch" + bytes(12) + cdhash, tmp_path / "stapled.dmg")
    assert "Ticket (65538)" in [b["slot"] for b in find_values(
        apple_platform.read_signature(stapled), "blobs")[0]]  # rcodesign reads it as a ticket
    check = verify_image(stapled, pins)
    assert check.passed, check.problems
    assert check.ticket is not None
    assert (check.ticket.magic, check.ticket.size, check.ticket.names_cdhash) == ("s8ch", 36, True)
    other = verify_image(staple(image, b"s8ch" + bytes(32), tmp_path / "o.dmg"), pins)
    assert other.ticket is not None and not other.ticket.names_cdhash


def test_an_unsigned_alternate_code_directory_fails(signed, tmp_path):
    """An alternate code directory the CMS signature does not bind is refused (rcodesign
    signs a disk image with one code directory; this one is added after signing)."""
    image, pins = signed
    data = image.read_bytes()
    offset, size = struct.unpack_from(">QQ", data, len(data) - 512 + 296)
    directory = bytearray(data[offset + 36:offset + 36 + struct.unpack_from(
        ">I", data, offset + 40)[0]])
    directory[directory.rindex(IDENTIFIER.encode())] = ord("X")
    added = tmp_path / "added.dmg"
    staple(image, b"", added)  # the helper's superblob rewrite, then the slot renamed
    out = bytearray(added.read_bytes())
    new_offset, new_size = struct.unpack_from(">QQ", out, len(out) - 512 + 296)
    superblob = bytearray(out[new_offset:new_offset + new_size])
    count, = struct.unpack_from(">I", superblob, 8)
    struct.pack_into(">I", superblob, 12 + 8 * (count - 1), 0x1000)
    last = struct.unpack_from(">I", superblob, 12 + 8 * (count - 1) + 4)[0]
    superblob = superblob[:last] + directory
    struct.pack_into(">I", superblob, 4, len(superblob))
    koly = bytearray(out[-512:])
    struct.pack_into(">QQ", koly, 296, new_offset, len(superblob))
    added.write_bytes(bytes(out[:new_offset]) + bytes(superblob) + bytes(koly))
    check = verify_image(added, pins)
    assert "code directory 0x1000 is not bound by the CMS signature's cdhashes attribute" in \
        check.problems, check.problems


def test_an_ad_hoc_signature_is_refused(tmp_path):
    image = tmp_path / "adhoc.dmg"
    apple_platform.sign(unsigned_image(tmp_path), image, binary_identifier=IDENTIFIER)
    check = verify_image(image, AppPins(TEAM))
    assert check.problems == ("the image has a code directory but no CMS signature (ad hoc: "
                              "nobody signed it)",)


def test_no_byte_of_the_signature_or_trailer_crashes_the_verifier(signed, tmp_path):
    """Every third byte of the superblob and every byte of the trailer, set to 0xff in turn
    (and the image cut at many lengths): a refusal with a reason or an input error, never
    another exception."""
    image, pins = signed
    data = image.read_bytes()
    offset, size = struct.unpack_from(">QQ", data, len(data) - 512 + 296)
    bad = tmp_path / "bad.dmg"
    tried = refused = 0
    for at in [*range(offset, offset + size, 3), *range(len(data) - 512, len(data))]:
        if data[at] == 0xFF:
            continue
        bad.write_bytes(data[:at] + b"\xff" + data[at + 1:])
        tried += 1
        try:
            check = verify_image(bad, pins)
        except InputError:
            continue
        refused += not check.passed
    assert refused > tried // 2  # most bytes are signed; a few (padding, reserved) are not
    for length in range(0, len(data), 97):
        bad.write_bytes(data[:length])
        with contextlib.suppress(InputError):
            assert not verify_image(bad, pins).passed


@pytest.fixture(scope="module")
def timestamped(tmp_path_factory):
    """An image signed by a leaf that expired after it signed, with a token from a test
    timestamp authority vouching for a time within the leaf's validity."""
    folder = tmp_path_factory.mktemp("stamped")
    chain = make_chain(folder, not_before=NOW - 60 * DAY, not_after=NOW - 30 * DAY)
    with serving(LocalTsa(folder / "tsa", gen_time=NOW - 40 * DAY)) as tsa:
        image = signed_image(folder, chain, signing_time=NOW - 40 * DAY,
                             timestamp_url=tsa.url)
    return image, chain, tsa


def test_a_verified_timestamp_makes_an_expired_since_leaf_pass(timestamped):
    """As macOS accepts a Developer ID signature whose certificate expired after a secure
    timestamp: the token's time is the signing time, and validity then suffices."""
    image, chain, tsa = timestamped
    check = verify_image(image, AppPins(TEAM, roots=(chain.root, tsa.root)))
    assert check.passed, check.problems
    assert check.timestamp_token and check.timestamp == "CN=test TSA"
    assert check.signing_time == (NOW - 40 * DAY).replace(microsecond=0).isoformat()
    entities = apple_platform.read_signature(image)  # rcodesign reads the same token
    assert find_values(entities, "time_stamp_token")


def test_a_timestamp_from_an_untrusted_authority_is_refused(timestamped):
    image, chain, _ = timestamped
    check = verify_image(image, AppPins(TEAM, roots=(chain.root,)))
    assert check.timestamp is None
    assert any(p.startswith("the timestamp token is refused: the signer CN=test TSA does not "
                            "chain to a trusted root") for p in check.problems), check.problems
    assert any("is not valid now" in p for p in check.problems)  # back to the claim + now


def test_a_timestamp_over_another_signature_is_refused(tmp_path):
    """A token whose imprint is not the digest of this CMS signature (an authority's token for
    another signature, moved here) is refused; the signer's claim then counts, and now."""
    chain = make_chain(tmp_path)
    with serving(LocalTsa(tmp_path / "tsa", imprint_over=b"another signature")) as tsa:
        image = signed_image(tmp_path, chain, timestamp_url=tsa.url)
    check = verify_image(image, AppPins(TEAM, roots=(chain.root, tsa.root)))
    assert check.problems == ("the timestamp token is refused: the timestamp token is over "
                              "another signature (its message imprint differs)",)
    assert check.timestamp_token and check.timestamp is None
