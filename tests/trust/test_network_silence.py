"""Issue 25 (new-user item, the seed's "documents no telemetry: verify"): every command opens
connections only to hosts the user named. Each command runs in-process under a socket guard that
records (and refuses) every connection and name lookup; the local workflow names no host, so
none may happen."""

from __future__ import annotations

import socket

import pytest

from tests.support.trust import make_key_pair, release_map, write_policy


@pytest.fixture
def guard(monkeypatch):
    """Every outbound connection and name lookup, recorded and refused."""
    attempts: list[str] = []

    def connect(self, address):
        attempts.append(f"connect {address!r}")
        raise OSError("network refused by the test's socket guard")

    def lookup(host, *args, **kwargs):
        attempts.append(f"getaddrinfo {host!r}")
        raise socket.gaierror("lookups refused by the test's socket guard")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    return attempts


def test_the_local_workflow_opens_no_connection(cli, guard, locked_pair, tmp_path):
    roots = ("--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}")
    lock = tmp_path / "dflash.lock"
    private, public = make_key_pair(tmp_path)
    feed = tmp_path / "feed.json"
    keyed = f"{{identities: [], public_keys: [{public}]}}"
    policy = write_policy(tmp_path / "p", ("  approvals: {identities: [], public_keys: []}",
                                           f"  approvals: {keyed}"),
                          ("  lockfile: {identities: [], public_keys: []}",
                           f"  lockfile: {keyed}"),
                          release_map("https://github.com/vllm-project/vllm", "v0.11.0", "a" * 40))
    commands = [
        ("lock", "--target", locked_pair.target, "--drafter", locked_pair.drafter, "-o", lock,
         "--engine",
         "vllm=https://github.com/vllm-project/vllm@" + "a" * 40 + "#v0.11.0",
         "--package", "torch==2.5.0+cpu@sha256:" + "4" * 64),
        ("verify", "--lock", lock, *roots),
        ("scan", locked_pair.drafter, "--target", locked_pair.target),
        ("review", "--lock", lock, *roots, "--reviewer", "me", "-o", tmp_path / "r.yaml"),
        ("policy", "check", "strict"), ("policy", "show", "dev"),
        ("export", "requirements", "--lock", lock, "-o", tmp_path / "requirements.txt"),
        ("advisory", "new", "--id", "x_T-1", "--summary", "s", "--pypi", "torch", "--version",
         "2.5.0", "--output", feed),
        ("audit", "--lock", lock, "--advisories", feed),
        ("sign", lock, "--key", private),
        ("gate", "--lock", lock, "--policy", policy, *roots, "--output", tmp_path / "a.json",
         "--key", private),
        ("verify-approval", tmp_path / "a.json", "--policy", policy, "--lock", lock, *roots),
    ]
    for command in commands:
        result = cli(*command)
        assert result.exit_code in (0, 1), (command, result.stderr)
        assert guard == [], (command[0], guard)
    assert cli(*commands[-2]).exit_code == 0  # the gate approved, and
    assert cli(*commands[-1]).exit_code == 0  # its record verifies


def test_the_guard_sees_a_connection_to_a_named_host(cli, guard, tmp_path):
    """The guard is live: a command told to reach a host tries exactly that host."""
    result = cli("monitor", "--metrics", "http://127.0.0.1:9/metrics", "--once",
                 "--interval", "0", "--timeout", "1")
    assert result.exit_code == 2
    assert guard and all("127.0.0.1" in a for a in guard)
