"""Fixtures for the policy, signing, provenance and gate tests."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

REPO = Path(__file__).resolve().parents[2]
DEFAULT_POLICY = REPO / "policies" / "default.yaml"


def make_key_pair(folder: Path, name: str = "key") -> tuple[Path, Path]:
    """A fresh ECDSA P-256 key pair as PEM files: (private, public)."""
    key = ec.generate_private_key(ec.SECP256R1())
    private = folder / f"{name}.pem"
    public = folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def flip_signature_byte(bundle_json: bytes) -> bytes:
    """The same bundle with one byte of its signature changed (still valid JSON and base64)."""
    bundle = json.loads(bundle_json)
    if "messageSignature" in bundle:
        holder, key = bundle["messageSignature"], "signature"
    else:
        holder, key = bundle["dsseEnvelope"]["signatures"][0], "sig"
    raw = bytearray(base64.b64decode(holder[key]))
    raw[len(raw) // 2] ^= 0x01
    holder[key] = base64.b64encode(bytes(raw)).decode()
    return json.dumps(bundle).encode()


def one_line(text: str) -> str:
    """CLI output with the console's line wrapping undone (rich wraps at the terminal width)."""
    return " ".join(text.split())


def flip_byte(path: Path, offset: int = 0) -> None:
    """Change one byte of a file in place."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def policy_text(*replacements: tuple[str, str]) -> str:
    """The default policy's text with exact substrings replaced (`(old, new)` pairs)."""
    text = DEFAULT_POLICY.read_text()
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


@pytest.fixture
def key_pair(tmp_path: Path) -> tuple[Path, Path]:
    return make_key_pair(tmp_path)
