"""`dflash-guard verify-app`: exit 0 on a verified image, 1 with a reason on a refused one, 2
with one line on what is no disk image; `--format json`; the lock's sha256 pin; hostile
trailers and superblobs refused with a reason, never a traceback."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tests.support.apple import TEAM, make_chain, signed_image, trust_policy, unsigned_image


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("app")
    chain = make_chain(folder / "chain")
    return signed_image(folder, chain), trust_policy(folder, chain)


def with_koly(image: Path, out: Path, **fields: int) -> Path:
    """`image` with trailer fields set: `sig` (offset, size), `plist` (offset, length)."""
    data = bytearray(image.read_bytes())
    at = {"sig": 296, "plist": 216}
    for name, (first, second) in fields.items():  # type: ignore[misc]
        struct.pack_into(">QQ", data, len(data) - 512 + at[name], first, second)
    out.write_bytes(bytes(data))
    return out


def test_a_verified_image_exits_0_with_its_facts(cli, world):
    image, policy = world
    result = cli("verify-app", image, "--policy", policy)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "VERIFIED" in result.stdout and f"team: {TEAM}" in result.stdout
    report = json.loads(cli("verify-app", image, "--policy", policy, "--json").stdout)
    assert report["passed"] is True and report["problems"] == []
    assert report["team_id"] == TEAM and report["anchor"] == "policy"


def test_the_default_policy_refuses_with_reasons(cli, world):
    image, _ = world
    result = cli("verify-app", image, "--format", "json")
    assert result.exit_code == 1
    problems = json.loads(result.stdout)["problems"]
    assert any("does not chain to a trusted root" in p for p in problems)
    assert "the policy pins no team for this app (engines.omlx.team_id)" in problems


def test_the_lock_pins_the_image_sha256(cli, world, tmp_path, monkeypatch):
    image, policy = world
    monkeypatch.chdir(tmp_path)
    other = unsigned_image(tmp_path / "other")
    for pinned, code, word in ((image, 0, "pinned"), (other, 1, "not pinned")):
        lock = tmp_path / f"{word}.lock"
        made = cli("lock", "--target", _folder(tmp_path, "t"), "--drafter",
                   _folder(tmp_path, "d"), "--package", f"omlx==0.3.1@{pinned}", "-o", lock)
        assert made.exit_code == 0, made.stdout + made.stderr
        result = cli("verify-app", image, "--policy", policy, "--lock", lock, "--json")
        assert result.exit_code == code, result.stdout
        assert json.loads(result.stdout)["lock"] == word
    exported = cli("export", "requirements", "--lock", tmp_path / "pinned.lock")
    assert exported.exit_code == 2 and "pins no packages" in exported.stderr  # not a wheel


def _folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "name": name}))
    return folder


@pytest.mark.parametrize("make, message", [
    (lambda d: d[:len(d) // 2], "not a UDIF disk image"),  # truncated
    (lambda d: b"PK\x03\x04" + bytes(100), "too short for a disk image"),
    (lambda d: bytes(4096), "not a UDIF disk image"),
    (lambda d: d[:-512] + b"koly" + b"\xff" * 508, "koly trailer says its size is"),
])
def test_what_is_no_disk_image_is_one_line_exit_2(cli, world, tmp_path, make, message):
    image, policy = world
    bad = tmp_path / "bad.dmg"
    bad.write_bytes(make(image.read_bytes()))
    result = cli("verify-app", bad, "--policy", policy)
    assert result.exit_code == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_hostile_trailers_and_superblobs_are_refused_with_a_reason(cli, world, tmp_path):
    image, policy = world
    data = image.read_bytes()
    offset, size = struct.unpack_from(">QQ", data, len(data) - 512 + 296)
    count_at = tmp_path / "count.dmg"
    raw = bytearray(data)
    struct.pack_into(">I", raw, offset + 8, 0xFFFFFFFF)
    count_at.write_bytes(bytes(raw))
    blob_at = tmp_path / "blob.dmg"
    raw = bytearray(data)
    struct.pack_into(">I", raw, offset + 16, 0x7FFFFFFF)  # the first blob's offset
    blob_at.write_bytes(bytes(raw))
    cases = {
        with_koly(image, tmp_path / "huge.dmg", sig=(offset, 2**63)):
            "the signature claims 9,223,372,036,854,775,808 bytes",
        with_koly(image, tmp_path / "past.dmg", sig=(offset, size + 10**6)):
            "runs past the trailer",
        with_koly(image, tmp_path / "moved.dmg", sig=(0, size)): "not right after",
        with_koly(image, tmp_path / "none.dmg", sig=(0, 0)): "the image is not signed",
        count_at: "claims 4294967295 blobs",
        blob_at: "lies outside the superblob",
        unsigned_image(tmp_path / "u"): "the image is not signed",
    }
    for bad, reason in cases.items():
        result = cli("verify-app", bad, "--policy", policy, "--json")
        assert result.exit_code == 1, (bad, result.stderr)
        problems = json.loads(result.stdout)["problems"]
        assert any(reason in p for p in problems), (bad, problems)


def test_a_policy_team_must_be_a_team_id(cli, world, tmp_path):
    image, _ = world
    policy = tmp_path / "p.yaml"
    policy.write_text("extends: default\nengines:\n  omlx:\n    team_id: nope\n")
    result = cli("verify-app", image, "--policy", policy)
    assert result.exit_code == 2 and "engines.omlx.team_id" in result.stderr
    policy.write_text("extends: default\nengines:\n  omlx:\n    team_id: TEAM123456\n"
                      "    roots: [missing.pem]\n")
    result = cli("verify-app", image, "--policy", policy)
    assert result.exit_code == 2 and "root certificate file" in result.stderr


def test_the_policys_roots_are_in_its_closure(world, tmp_path):
    """A root the policy trusts is a file of its closure: another root beside the same policy
    text is another policy (the approval record's digest changes)."""
    from dflash_guard.trust.closure import policy_closure
    from dflash_guard.trust.policy import load_policy

    _, given = world
    policy = tmp_path / "policy.yaml"
    policy.write_bytes(given.read_bytes())
    root = tmp_path / "root.pem"
    root.write_bytes((given.parent / "root.pem").read_bytes())
    loaded = load_policy(str(policy))
    assert ("engines.omlx.roots", root) in loaded.files()
    before = policy_closure(loaded).digest
    root.write_bytes(make_chain(tmp_path / "other").root.read_bytes())
    assert policy_closure(load_policy(str(policy))).digest != before
