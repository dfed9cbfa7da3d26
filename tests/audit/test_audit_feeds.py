"""Feeds are artifacts: signatures beside them, HTTPS-only downloads with a cap, a maximum age."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from dflash_guard.audit.feeds import FeedRules, download
from dflash_guard.audit.run import run_audit
from dflash_guard.errors import InputError
from dflash_guard.rules import ADV_AFFECTED
from dflash_guard.trust.policy import Signers
from dflash_guard.trust.signing import sign_with_key
from tests.support.audit import (
    DRAFTER_COMMIT,
    DRAFTER_REPO,
    NOW,
    osv,
    serve_folder,
    write_feed,
    write_lock,
)


def _drafter_record(modified: dt.datetime = NOW):
    return osv("x_FEED-1", [{"package": {"ecosystem": "GIT", "name": "drafter",
                                         "purl": f"pkg:huggingface/{DRAFTER_REPO}"},
                             "versions": [DRAFTER_COMMIT]}], modified=modified)


@pytest.fixture
def lock(tmp_path):
    return write_lock(tmp_path / "dflash.lock", engine_commit="a" * 40)


@pytest.fixture
def signed_feed(tmp_path, feed_key_pair):
    feed = write_feed(tmp_path / "feed.json", _drafter_record())
    sign_with_key(feed, feed_key_pair[0])
    return feed


def _rules(feed_key_pair, **options):
    return FeedRules(signers=Signers((), (feed_key_pair[1],)), **options)


def test_feed_signed_with_accepted_key_passes(lock, signed_feed, feed_key_pair):
    report = run_audit(lock, [str(signed_feed)], rules=_rules(feed_key_pair, allow_unsigned=False),
                       now=NOW)
    assert report.feed_problems == ()
    [file] = report.feeds[0].files
    assert file.signatures[0].ok and file.signatures[0].signer.startswith("key feed-key.pub")


def test_feed_tampered_signed_feed_is_refused(cli, lock, signed_feed, feed_key_pair):
    record = json.loads(signed_feed.read_text())
    record["affected"][0]["versions"] = ["c" * 40]  # hide the drafter from the advisory
    signed_feed.write_text(json.dumps(record))
    report = run_audit(lock, [str(signed_feed)], rules=_rules(feed_key_pair), now=NOW)
    assert report.findings == () and not report.passed
    assert "signature feed.json.sig refused" in report.feed_problems[0]
    result = cli("audit", "--lock", lock, "--advisories", signed_feed, "--public-key",
                 feed_key_pair[1], "--format", "json")
    assert result.exit_code == 1 and json.loads(result.stdout)["feed_problems"]


def test_feed_signed_but_no_accepted_signer_is_refused(lock, signed_feed):
    report = run_audit(lock, [str(signed_feed)], now=NOW)
    assert "accepts no public key" in report.feed_problems[0]


def test_feed_unsigned_refused_only_when_signatures_required(lock, tmp_path, feed_key_pair):
    feed = write_feed(tmp_path / "feed.json", _drafter_record())
    assert run_audit(lock, [str(feed)], rules=_rules(feed_key_pair), now=NOW).feed_problems == ()
    report = run_audit(lock, [str(feed)], rules=_rules(feed_key_pair, allow_unsigned=False),
                       now=NOW)
    assert "not signed" in report.feed_problems[0]


def test_feed_stale_is_refused(cli, lock, tmp_path):
    feed = write_feed(tmp_path / "feed.json", _drafter_record(NOW - dt.timedelta(days=40)))
    fresh = run_audit(lock, [str(feed)], rules=FeedRules(max_age=dt.timedelta(days=60)),
                      now=NOW)
    assert fresh.feed_problems == ()
    stale = run_audit(lock, [str(feed)], rules=FeedRules(max_age=dt.timedelta(days=30)),
                      now=NOW)
    assert "stale" in stale.feed_problems[0] and "re-check" in stale.feed_problems[0]
    result = cli("audit", "--lock", lock, "--advisories", feed, "--max-age-days", "1")
    assert result.exit_code == 1 and "stale" in result.stdout


def test_feed_folder_skips_signature_files_and_has_a_listing_digest(lock, tmp_path, feed_key_pair):
    folder = tmp_path / "feeds"
    folder.mkdir()
    write_feed(folder / "a.json", _drafter_record())
    sign_with_key(folder / "a.json", feed_key_pair[0])
    write_feed(folder / "b.json", osv("x_FEED-2", []))
    report = run_audit(lock, [str(folder)], rules=_rules(feed_key_pair), now=NOW)
    assert [f.name for f in report.feeds[0].files] == ["a.json", "b.json"]
    assert report.ids(ADV_AFFECTED.id) == ["x_FEED-1"] and report.feed_problems == ()
    strict = run_audit(lock, [str(folder)], rules=_rules(feed_key_pair, allow_unsigned=False),
                       now=NOW)
    assert len(strict.feed_problems) == 1 and "b.json is not signed" in strict.feed_problems[0]


def test_feed_empty_folder_is_input_error(lock, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="never means clean"):
        run_audit(lock, [str(tmp_path / "empty")], now=NOW)


def test_feed_url_from_loopback_with_its_signature(lock, tmp_path, signed_feed, feed_key_pair):
    with serve_folder(tmp_path) as base:
        report = run_audit(lock, [f"{base}/feed.json"],
                           rules=_rules(feed_key_pair, allow_unsigned=False), now=NOW)
        assert report.feed_problems == () and report.ids(ADV_AFFECTED.id) == ["x_FEED-1"]
        assert report.feeds[0].source == f"{base}/feed.json"
        signed_feed.write_text(signed_feed.read_text().replace(DRAFTER_COMMIT, "c" * 40))
        tampered = run_audit(lock, [f"{base}/feed.json"], rules=_rules(feed_key_pair), now=NOW)
        assert tampered.feed_problems and tampered.findings == ()
        with pytest.raises(InputError, match="HTTP 404"):
            run_audit(lock, [f"{base}/missing.json"], now=NOW)
        with pytest.raises(InputError, match="over the 10-byte limit"):
            download(f"{base}/feed.json", tmp_path / "copy.json", max_bytes=10)
        assert not (tmp_path / "copy.json").exists()


@pytest.mark.parametrize("url", ["http://example.com/feed.json", "ftp://127.0.0.1/feed.json",
                                 "https://user:secret@example.com/feed.json"])
def test_feed_url_refused_before_any_request(lock, url):
    with pytest.raises(InputError) as error:
        run_audit(lock, [url], now=NOW)
    assert "secret" not in str(error.value)


def test_feed_zip_as_osv_dev_publishes_it(lock, tmp_path):
    import zipfile

    archive = tmp_path / "all.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("x_FEED-1.json", json.dumps(_drafter_record()))
        zf.writestr("x_FEED-2.json", json.dumps(osv("x_FEED-2", [])))
    report = run_audit(lock, [str(archive)], now=NOW)
    assert report.advisories == 2 and report.ids(ADV_AFFECTED.id) == ["x_FEED-1"]
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("x_FEED-3.json", json.dumps(osv("x_FEED-3", [{"versions": 3}])))
    with pytest.raises(InputError, match=r"all\.zip:x_FEED-3\.json: affected\[0\]\.versions: "):
        run_audit(lock, [str(archive)], now=NOW)


def test_feed_changed_between_parse_and_verify_is_refused(lock, signed_feed, feed_key_pair,
                                                          monkeypatch):
    from dflash_guard.audit import feeds

    verify = feeds.verify_key_signature

    def swap_then_verify(path, sig, keys, *, subject):
        path.write_text(path.read_text().replace(DRAFTER_COMMIT, "c" * 40))
        sign_with_key(path, feed_key_pair[0])  # a validly signed, different feed
        return verify(path, sig, keys, subject=subject)

    monkeypatch.setattr(feeds, "verify_key_signature", swap_then_verify)
    with pytest.raises(InputError, match="changed while it was being read"):
        run_audit(lock, [str(signed_feed)], rules=_rules(feed_key_pair), now=NOW)


@pytest.mark.parametrize("suffix", [".sigstore.json", ".sigstore"])
def test_feed_sigstore_bundle_beside_it_is_checked(lock, tmp_path, suffix):
    from dflash_guard.trust.policy import Identity

    feed = write_feed(tmp_path / "feed.json", _drafter_record())
    (tmp_path / f"feed.json{suffix}").write_text("{}")
    nobody = run_audit(lock, [str(feed)], now=NOW)
    assert "accepts no Sigstore identity" in nobody.feed_problems[0]
    ci = Signers((Identity("https://github.com/o/r/.github/workflows/feed.yml@refs/heads/main",
                           "https://token.actions.githubusercontent.com"),), ())
    report = run_audit(lock, [str(feed)], rules=FeedRules(signers=ci), now=NOW)
    assert f"feed.json{suffix} refused: not a valid Sigstore bundle" in report.feed_problems[0]


def test_feed_real_sigstore_bundle_verifies_and_tampered_bytes_do_not(shared_vectors, tmp_path):
    """A real staging bundle (sigstore-python's `bundle.txt.sigstore`, the FEED.sigstore layout)
    through the exact code that checks a feed's signatures, offline with the staging root."""
    import shutil

    from dflash_guard.audit.feeds import _signature_checks
    from dflash_guard.trust.policy import Identity

    vectors = shared_vectors / "sigstore-python"
    blob = shutil.copy(vectors / "bundle.txt", tmp_path / "bundle.txt")
    shutil.copy(vectors / "bundle.txt.sigstore", tmp_path / "bundle.txt.sigstore")
    rules = FeedRules(signers=Signers((Identity("a@tny.town", "https://github.com/login/oauth"),),
                                      ()), trust_root=vectors / "staging-trusted_root.json")
    data = blob.read_bytes()
    [check] = _signature_checks(blob, data, rules, "bundle.txt")
    assert check.ok and check.signer.startswith("a@tny.town")
    blob.write_bytes(data + b" ")
    [check] = _signature_checks(blob, data + b" ", rules, "bundle.txt")
    assert not check.ok


def test_feed_signature_named_with_bundle(lock, tmp_path, feed_key_pair):
    """`audit --bundle FILE`: the one feed file's signature kept elsewhere is the one checked."""
    feed = write_feed(tmp_path / "feed.json", _drafter_record())
    elsewhere = sign_with_key(feed, feed_key_pair[0], out=tmp_path / "sigs.bundle")
    report = run_audit(lock, [str(feed)], now=NOW, rules=_rules(
        feed_key_pair, allow_unsigned=False, bundle=elsewhere))
    assert report.feed_problems == ()
    [file] = report.feeds[0].files
    assert [c.signature for c in file.signatures] == [str(elsewhere)] and file.signatures[0].ok
    other = write_feed(tmp_path / "other.json", _drafter_record(NOW - dt.timedelta(days=1)))
    report = run_audit(lock, [str(other)], now=NOW, rules=_rules(
        feed_key_pair, allow_unsigned=False, bundle=elsewhere))
    assert report.feed_problems  # that bundle signs feed.json, not other.json
