"""Issue 25: a hostile feed or clone changes no answer and runs nothing; an unsigned record never
overrides a signed one; versions compare by PEP 440 public version (local labels dropped)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from dflash_guard.audit.feeds import FeedRules
from dflash_guard.audit.run import run_audit
from dflash_guard.errors import InputError
from dflash_guard.rules import ADV_AFFECTED
from dflash_guard.trust.gitclone import GitClone
from dflash_guard.trust.policy import Signers
from dflash_guard.trust.signing import sign_with_key
from tests.support.audit import (
    ENGINE_URL,
    NOW,
    git,
    make_history,
    make_key_pair,
    osv,
    write_feed,
    write_lock,
)

TORCH = "torch"


def _pypi(name: str, *, versions=(), events=()) -> list[dict]:
    entry: dict = {"package": {"ecosystem": "PyPI", "name": name}, "versions": list(versions)}
    if events:
        entry["ranges"] = [{"type": "ECOSYSTEM", "events": list(events)}]
    return [entry]


@pytest.fixture
def torch_lock(tmp_path) -> Path:
    return write_lock(tmp_path / "t.lock", engine_commit="a" * 40,
                      packages=(("torch", "2.5.0+cpu"),))


def _audit(lock, *feeds, signers=None):
    rules = FeedRules(signers or Signers((), ()), allow_unsigned=True)
    return run_audit(lock, [str(f) for f in feeds], rules=rules, now=NOW)


# --- N5 and its class: local labels ----------------------------------------------------------


@pytest.mark.parametrize("affected", [
    _pypi(TORCH, versions=["2.5.0"]),  # the doc's case: listed public version
    _pypi(TORCH, events=[{"introduced": "0"}, {"last_affected": "2.5.0"}]),  # the doc's case
    _pypi(TORCH, events=[{"introduced": "2.5.0"}, {"fixed": "2.5.1"}]),  # introduced at it
    _pypi(TORCH, events=[{"introduced": "0"}, {"limit": "2.5.1"}]),
    _pypi(TORCH, versions=["2.5.0+cpu"]),  # the exact local build listed
])
def test_a_local_build_is_its_public_version(tmp_path, torch_lock, affected):
    feed = write_feed(tmp_path / "a.json", osv("x_T-1", affected))
    report = _audit(torch_lock, feed)
    assert report.ids(ADV_AFFECTED.id) == ["x_T-1"]


def test_another_local_build_listed_is_not_this_one(tmp_path, torch_lock):
    feed = write_feed(tmp_path / "a.json", osv("x_T-1", _pypi(TORCH, versions=["2.5.0+cu121"])))
    assert _audit(torch_lock, feed).ids(ADV_AFFECTED.id) == []


# --- N4 and its class: signed records win ----------------------------------------------------


def _signed_feed(folder: Path, private: Path, *records) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    feed = write_feed(folder / "feed.json", *records)
    sign_with_key(feed, private)
    return feed


@pytest.mark.parametrize("override", ["narrower", "withdrawn", "other-id-same-alias"])
def test_an_unsigned_newer_record_never_overrides_a_signed_one(tmp_path, torch_lock, override):
    private, public = make_key_pair(tmp_path)
    vendor = osv("x_T-3", _pypi(TORCH, events=[{"introduced": "0"}, {"fixed": "2.6.0"}]))
    later = NOW + dt.timedelta(hours=1)
    changed = dict(vendor, modified=later.isoformat().replace("+00:00", "Z"))
    if override == "narrower":
        changed["affected"] = _pypi(TORCH, events=[{"introduced": "0"}, {"fixed": "0.0.1"}])
    elif override == "withdrawn":
        changed["withdrawn"] = changed["modified"]
    else:
        changed["affected"] = _pypi("nothing-here", versions=["1.0"])
    signed = _signed_feed(tmp_path / "vendor", private, vendor)
    local = tmp_path / "local"
    local.mkdir()
    unsigned = write_feed(local / "override.json", changed)
    signers = Signers((), (public,))
    for order in ((signed, unsigned), (unsigned, signed)):
        report = _audit(torch_lock, *order, signers=signers)
        assert report.ids(ADV_AFFECTED.id) == ["x_T-3"], order
        assert report.overrides_refused and "unsigned record" in report.overrides_refused[0]
        assert report.to_json()["overrides_refused"]


def test_a_signed_newer_record_does_replace_a_signed_one(tmp_path, torch_lock):
    private, public = make_key_pair(tmp_path)
    vendor = osv("x_T-3", _pypi(TORCH, events=[{"introduced": "0"}, {"fixed": "2.6.0"}]))
    later = NOW + dt.timedelta(hours=1)
    fixed = dict(vendor, modified=later.isoformat().replace("+00:00", "Z"),
                 affected=_pypi(TORCH, events=[{"introduced": "0"}, {"fixed": "0.0.1"}]))
    a = _signed_feed(tmp_path / "a", private, vendor)
    b = _signed_feed(tmp_path / "b", private, fixed)
    report = _audit(torch_lock, a, b, signers=Signers((), (public,)))
    assert report.ids(ADV_AFFECTED.id) == [] and not report.overrides_refused


# --- N18, N23, N26 and their class: bounded feed reads ---------------------------------------


@pytest.mark.parametrize("kind", ["deep", "huge-int", "fifo", "dev-zero-link", "zip-bomb-member"])
def test_hostile_feed_files_are_one_readable_error(tmp_path, torch_lock, kind):
    import os
    import zipfile

    path = tmp_path / "feed.json"
    if kind == "deep":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "huge-int":
        path.write_text('{"id": ' + "9" * 5000 + "}")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero-link":
        path.symlink_to("/dev/zero")
    else:
        path = tmp_path / "bomb.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, \
                archive.open("a.json", "w", force_zip64=True) as member:
            for _ in range(8):
                member.write(b" " * (1 << 20))
    with pytest.raises(InputError) as info:
        _audit(torch_lock, path)
    assert "\n" not in str(info.value)


# --- N10 and its class: a URL is never a path ------------------------------------------------


@pytest.mark.parametrize("source", ["HTTPS://advisories.example.org/feed.json",
                                    "Https://advisories.example.org/feed.json"])
def test_a_url_in_any_case_is_never_read_from_the_working_folder(tmp_path, torch_lock,
                                                                  monkeypatch, source):
    planted = tmp_path / "HTTPS:" / "advisories.example.org"
    planted.mkdir(parents=True)
    (planted / "feed.json").write_text(json.dumps(osv("x_N-1", _pypi("nothing"))))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as info:  # fetched over the network (none here): an error
        _audit(torch_lock, source)
    assert "advisory feed" in str(info.value)


@pytest.mark.parametrize("source", ["ftp://h/feed.json", "file:///etc/passwd",
                                    "https://user:tok@h/feed.json",
                                    "https://h/feed.json?access_token=x"])
def test_other_schemes_and_credentials_in_feed_urls_are_refused(torch_lock, source):
    with pytest.raises(InputError):
        _audit(torch_lock, source)


# --- N2 and its class: a hostile clone runs nothing ------------------------------------------


def _hostile(path: Path, marker: Path, setting: tuple[str, str]) -> str:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "x")
    git(path, "config", "core.sshCommand", f"sh -c 'touch {marker}; exit 1' --")
    git(path, "config", "remote.origin.url", "ssh://example.invalid/repo")
    git(path, "config", *setting)
    return git(path, "rev-parse", "HEAD")


@pytest.mark.parametrize("setting", [
    ("extensions.partialClone", "origin"),  # the doc's case (with repositoryformatversion 1)
    ("remote.origin.promisor", "true"),
    ("core.repositoryformatversion", "1"),
])
def test_a_partial_or_promisor_clone_is_refused_and_runs_nothing(tmp_path, setting):
    marker = tmp_path / "PWNED"
    _hostile(tmp_path / "clone", marker, setting)
    with pytest.raises(InputError, match="only a plain full clone"):
        GitClone(tmp_path / "clone")
    assert not marker.exists()


def test_a_clone_borrowing_objects_through_alternates_is_refused(tmp_path):
    history = make_history(tmp_path / "real")
    borrower = tmp_path / "borrower"
    git(tmp_path, "clone", "-q", "--shared", str(history.path), str(borrower))
    with pytest.raises(InputError, match="alternates"):
        GitClone(borrower)


def test_replace_refs_and_git_environment_change_no_answer(tmp_path, monkeypatch):
    history = make_history(tmp_path / "repo")
    clone = GitClone(history.path)
    assert not clone.is_ancestor(history.intro, history.side)
    # A replace ref would make `side` look like it descends from `intro`; it is ignored.
    git(history.path, "replace", "--graft", history.side, history.intro)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))  # the caller's git settings
    assert not GitClone(history.path).is_ancestor(history.intro, history.side)


def test_the_clones_hooks_and_fsmonitor_never_run(tmp_path):
    marker = tmp_path / "RAN"
    history = make_history(tmp_path / "repo")
    git(history.path, "config", "core.fsmonitor", f"touch {marker}; echo")
    hooks = history.path / ".git" / "hooks"
    for hook in ("post-checkout", "reference-transaction", "pre-auto-gc"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / hook).chmod(0o755)
    clone = GitClone(history.path)
    assert clone.has(history.fix) and clone.is_ancestor(history.root, history.fix)
    assert not clone.has("f" * 40)
    assert not marker.exists()


def test_engine_url_forms_match_the_advisory_repo(tmp_path):
    from dflash_guard.urls import repo_key

    forms = [ENGINE_URL, ENGINE_URL.upper().replace("HTTPS", "https") + ".git/",
             "git+ssh://git@github.com/example-org/engine.git",
             "git@github.com:Example-Org/engine",
             "https://github.com//example-org//engine.git.git",
             "https://github.com/example%2Dorg/engine"]
    assert {repo_key(u) for u in forms} == {"github.com/example-org/engine"}
