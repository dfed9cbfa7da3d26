"""Signed disk images for the `verify-app` tests, made by rcodesign (apple-platform-rs, through
the `apple-platform-py` wheel: an implementation independent of ours) with a test chain made
here with `cryptography`: a root CA and a code-signing leaf whose subject OU is its team. The
keys are RSA, as Apple's are: rcodesign re-encodes an ECDSA certificate with NULL algorithm
parameters, which cryptography's strict parser (rightly) refuses."""

from __future__ import annotations

import dataclasses
import datetime as dt
import struct
from pathlib import Path

import apple_platform
from apple_platform import packaging
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TEAM = "TEAM123456"
IDENTIFIER = "com.example.omlx"
NOW = dt.datetime.now(dt.UTC)
DAY = dt.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class TestChain:
    """A test root and a leaf under it, as PEM files in a folder."""

    root: Path  # the root certificate (PEM): what a test policy trusts
    leaf: Path
    key: Path


def _name(common: str, team: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if team is not None:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, team))
    return x509.Name(parts)


def _pem(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def make_chain(folder: Path, *, team: str = TEAM, usage: x509.ObjectIdentifier =
               ExtendedKeyUsageOID.CODE_SIGNING, not_before: dt.datetime = NOW - DAY,
               not_after: dt.datetime = NOW + 30 * DAY) -> TestChain:
    """A root CA valid around now and a leaf (team `team`, extended key usage `usage`, valid
    `not_before` to `not_after`) it issued, written under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    root_key = rsa.generate_private_key(65537, 2048)
    root = (x509.CertificateBuilder().subject_name(_name("dflash-guard test root"))
            .issuer_name(_name("dflash-guard test root")).public_key(root_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - 3650 * DAY).not_valid_after(NOW + 3650 * DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(root_key, hashes.SHA256()))
    leaf_key = rsa.generate_private_key(65537, 2048)
    leaf = (x509.CertificateBuilder()
            .subject_name(_name(f"Developer ID Application: Test ({team})", team))
            .issuer_name(root.subject).public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=True)
            .sign(root_key, hashes.SHA256()))
    key = folder / "leaf.key"
    key.write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return TestChain(_pem(folder / "root.pem", root), _pem(folder / "leaf.pem", leaf), key)


def unsigned_image(folder: Path) -> Path:
    """A small FAT32 disk image (rcodesign's `dmg_create`), not signed."""
    content = folder / "content"
    content.mkdir(parents=True, exist_ok=True)
    (content / "oMLX.txt").write_text("an application would be here\n")
    image = folder / "unsigned.dmg"
    packaging.dmg_create(content, image, volume_label="oMLX")
    return image


def signed_image(folder: Path, chain: TestChain, *, name: str = "oMLX.dmg",
                 signing_time: dt.datetime | None = None,
                 digests: tuple[str, ...] = (), timestamp_url: str = "none") -> Path:
    """An image rcodesign signed with `chain`'s leaf (no timestamp server unless
    `timestamp_url`: tests/support/apple_tsa.py serves one on 127.0.0.1)."""
    out = folder / name
    apple_platform.sign(
        unsigned_image(folder), out,
        signer=apple_platform.Signer(pem=apple_platform.PemKey(
            files=[str(chain.key), str(chain.leaf), str(chain.root)])),
        binary_identifier=IDENTIFIER, timestamp_url=timestamp_url, signing_time=signing_time,
        digests=list(digests) or None)
    return out


def trust_policy(folder: Path, chain: TestChain | None, *, team: str = TEAM) -> Path:
    """A policy extending `default` that pins `team` for oMLX and trusts `chain`'s root
    instead of Apple's (None: Apple's roots only)."""
    roots = f"\n    roots: [{chain.root.name}]" if chain is not None else ""
    policy = (chain.root.parent if chain is not None else folder) / "policy.yaml"
    policy.write_text(f"extends: default\nengines:\n  omlx:\n    team_id: {team}\n"
                      f"    identifier: {IDENTIFIER}{roots}\n")
    return policy


def staple(image: Path, ticket: bytes, out: Path) -> Path:
    """`image` with `ticket` stapled as rcodesign staples one (a wrapper blob in slot 0x10002 of
    the superblob, the trailer's signature size updated): rcodesign's Python API only staples
    what it fetches from Apple."""
    data = image.read_bytes()
    koly = bytearray(data[-512:])
    offset, size = struct.unpack_from(">QQ", koly, 296)
    blob = data[offset:offset + size]
    count, = struct.unpack_from(">I", blob, 8)
    index = [struct.unpack_from(">II", blob, 12 + 8 * i) for i in range(count)]
    blobs = [blob[o:(index[i + 1][1] if i + 1 < count else size)] for i, (_, o) in
             enumerate(index)]
    slots = [s for s, _ in index] + [0x10002]
    blobs.append(struct.pack(">II", 0xFADE0B01, 8 + len(ticket)) + ticket)
    head = 12 + 8 * len(slots)
    table, body = b"", b""
    for slot, part in zip(slots, blobs, strict=True):
        table += struct.pack(">II", slot, head + len(body))
        body += part
    superblob = struct.pack(">III", 0xFADE0CC0, head + len(body), len(slots)) + table + body
    struct.pack_into(">QQ", koly, 296, offset, len(superblob))
    out.write_bytes(data[:offset] + superblob + bytes(koly))
    return out
