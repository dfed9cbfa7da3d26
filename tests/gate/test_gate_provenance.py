"""Issue 15 item 3: Hub provenance is established, not inferred from a folder's path.

A plain folder laid out as `models--z-lab--NAME/snapshots/<40 hex>` must not get z-lab's trust
tier: it is locked `cache-unconfirmed` and gets the policy's `cache_tier` (`unknown` in every
built-in policy: issue 34, not even the local tier), unless an earlier lock confirmed against the
Hub lists the same files at that commit."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.pins.lockfile import (
    CACHE_UNCONFIRMED,
    HUB_CONFIRMED,
    load_lockfile,
    parse_lockfile,
)
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.provenance import read_approval
from tests.support.trust import REPO, as_hub, signed_lock, write_policy

COMMITS = {"target": "1" * 40, "drafter": "2" * 40}
LOCAL_IS_UNKNOWN = ("local_tier: official", "local_tier: unknown")


def fake_snapshot(base, role: str, source) -> object:
    """A plain folder laid out like an HF-cache snapshot of `z-lab/<role>`."""
    folder = base / f"models--z-lab--{role}" / "snapshots" / COMMITS[role]
    shutil.copytree(source, folder)
    return folder


@pytest.fixture
def snapshots(locked_pair, tmp_path):
    return {role: fake_snapshot(tmp_path / "cache", role, folder)
            for role, folder in locked_pair.roots.items()}


def test_snapshot_path_is_locked_unconfirmed_and_gets_the_cache_tier(cli, snapshots, tmp_path):
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", snapshots["target"], "--drafter", snapshots["drafter"], "-o", out)
    assert r.exit_code == 0, r.stderr
    assert "cache-unconfirmed" in r.stdout
    lock = load_lockfile(out)
    drafter = lock.artifact("drafter")
    assert (drafter.source, drafter.repo, drafter.provenance) == (
        "hub", "z-lab/drafter", CACHE_UNCONFIRMED)
    policy = load_policy(write_policy(tmp_path / "p"))  # local_tier: official
    assert policy.artifact_tier(drafter, True) == "unknown"  # neither z-lab's nor the local tier
    assert policy.artifact_tier(dataclasses.replace(drafter, provenance=HUB_CONFIRMED), True) == (
        "official")
    trusting = load_policy(write_policy(tmp_path / "q", ("cache_tier: unknown",
                                                          "cache_tier: community")))
    assert trusting.artifact_tier(drafter, True) == "community"  # only when the policy says so


def test_gate_refuses_a_fake_snapshot_it_would_approve_as_a_plain_folder(cli, snapshots,
                                                                        tmp_path):
    out = tmp_path / "dflash.lock"
    assert cli("lock", "--target", snapshots["target"], "--drafter", snapshots["drafter"],
               "-o", out).exit_code == 0
    policy = write_policy(tmp_path / "p")  # the same pair as local folders is approved
    result = run_gate(GateOptions(out, policy, snapshots, out=tmp_path / "approval.json"))
    assert not result.approved
    assert "unknown tier" in result.reason, result.reason
    assert not (tmp_path / "approval.json").exists()


def test_confirmed_by_an_earlier_hub_lock(cli, locked_pair, snapshots, tmp_path):
    confirmed = dataclasses.replace(locked_pair.lock, artifacts=tuple(
        as_hub(a, f"z-lab/{a.role}", COMMITS[a.role]) for a in locked_pair.lock.artifacts))
    earlier, signers = signed_lock(confirmed, tmp_path / "online")
    policy = write_policy(tmp_path / "p", LOCAL_IS_UNKNOWN, signers)
    out = tmp_path / "dflash.lock"
    args = ("lock", "--target", snapshots["target"], "--drafter", snapshots["drafter"],
            "--confirmed-by", earlier, "--policy", policy, "-o", out)
    r = cli(*args)
    assert r.exit_code == 0, r.stderr
    lock = load_lockfile(out)
    assert {a.provenance for a in lock.artifacts} == {HUB_CONFIRMED}
    # The new lock's own claims count only once it is signed by a policy signer too.
    unsigned = run_gate(GateOptions(out, policy, snapshots))
    assert not unsigned.approved
    assert "hub-confirmed not trusted" in unsigned.checks[1].outcome.reason
    private = earlier.parent / "lock.pem"
    from dflash_guard.trust.signing import sign_with_key
    sign_with_key(out, private)
    result = run_gate(GateOptions(out, policy, snapshots, out=tmp_path / "approval.json"))
    assert result.approved, result.reason
    recorded = read_approval(tmp_path / "approval.json")["predicate"]["artifacts"]
    assert {a["provenance"] for a in recorded} == {HUB_CONFIRMED}

    config = snapshots["drafter"] / "config.json"
    config.write_text(config.read_text().replace("{", "{ ", 1))
    r = cli(*args[:-2], "-o", tmp_path / "again.lock")
    assert r.exit_code == 1 and "confirmed l" in " ".join(r.stdout.split())


def test_version_1_lockfiles_still_load_with_hub_artifacts_unconfirmed():
    text = (REPO / "lockfiles" / "example-qwen3-8b.lock").read_text()
    lock = parse_lockfile(text, "example-qwen3-8b.lock")
    assert lock.lockfile_version == 1
    assert all(a.source == "hub" and not a.hub_confirmed for a in lock.artifacts)
    # Unconfirmed, so the org in the repo name counts for nothing: the cache tier (issue 34).
    assert load_policy("default").artifact_tier(lock.artifacts[0], True) == "unknown"
    assert load_policy("strict").artifact_tier(lock.artifacts[0], True) == "unknown"
