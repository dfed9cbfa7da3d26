"""Key files that are not what `--key` needs (issue 15, item 13): an RSA key where an ECDSA key
is expected, a device, a FIFO. Each is one line, exit 2, and nothing is read unbounded."""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.hostile import one_line_error, unblocking


@pytest.fixture
def lock_file(tmp_path):
    path = tmp_path / "dflash.lock"
    path.write_text("any content\n")
    return path




def test_an_rsa_key_is_refused_as_one_line(cli, lock_file, tmp_path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "rsa.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    message = one_line_error(cli("sign", lock_file, "--key", pem))
    assert "RSA key" in message and "ECDSA" in message
    assert not (tmp_path / "dflash.lock.sig").exists()


def test_a_device_key_is_not_read(cli, lock_file):
    assert "a device, not a regular file" in one_line_error(
        cli("sign", lock_file, "--key", "/dev/zero"))


def test_a_fifo_key_is_not_read(cli, lock_file, tmp_path):
    fifo = tmp_path / "key.pem"
    os.mkfifo(fifo)
    with unblocking(fifo):
        result = cli("sign", lock_file, "--key", fifo)
    assert "a FIFO, not a regular file" in one_line_error(result)


def test_a_key_that_is_not_pem_is_one_line(cli, lock_file, tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"\x00" * 100)
    assert "not an unencrypted PEM private key" in one_line_error(
        cli("sign", lock_file, "--key", junk))
