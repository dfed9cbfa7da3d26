"""Advisory feeds: a JSON file, a folder of them, or an HTTPS URL, each treated as an artifact.

A feed file holds one OSV record, a JSON list of them, or (osv.dev's `all.zip`) a zip archive
of record files. A feed is named by its digest (the
file's sha256; for a folder, the sha256 of its sorted `sha256  path` listing), may carry a
signature beside each file (`FILE.sigstore.json` or `FILE.sigstore`: a Sigstore bundle over the
bytes; `FILE.sig`: an OpenSSF key signature, as `dflash-guard sign` writes them), and has an age:
the time since its newest record's `modified`. `feed_problems` refuses a signature that does not
verify, an unsigned file where signatures are required, and a feed older than the maximum age.

Downloads go over HTTPS only (plain `http://` is accepted for a loopback host, for local mirrors
and tests), with a timeout, a size cap, and an atomic write into a private folder; the signature
is fetched from `URL.sigstore.json`, `URL.sigstore` and `URL.sig` (a 404 means "none").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import io
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from dflash_guard.audit.osv import Advisory, format_time, parse_advisories
from dflash_guard.download import check_url
from dflash_guard.download import download as bounded_download
from dflash_guard.errors import InputError
from dflash_guard.fileio import loads_json, read_input, write_atomic
from dflash_guard.trust.policy import Signers
from dflash_guard.trust.signing import (
    KEY_SIG_SUFFIX,
    SIGSTORE_SUFFIX,
    SignatureCheck,
    is_key_bundle,
    verify_blob_bundle,
    verify_key_signature,
)
from dflash_guard.urls import has_scheme

MAX_FEED_BYTES = 64 * 1024 * 1024
MAX_ZIP_BYTES = 1024 * 1024 * 1024  # uncompressed, for a zip feed
MAX_RECORD_BYTES = 4 * 1024 * 1024  # one record of a zip feed (osv.dev's are a few KB)
TIMEOUT_S = 30.0
FEED = "advisory feed"  # how errors name a feed URL
BUNDLE_SUFFIXES = (SIGSTORE_SUFFIX, ".sigstore")
SIGNATURE_SUFFIXES = (*BUNDLE_SUFFIXES, KEY_SIG_SUFFIX)


@dataclasses.dataclass(frozen=True)
class FeedRules:
    """What a feed must satisfy: who may sign it, whether unsigned is acceptable, its age."""

    signers: Signers = Signers((), ())
    allow_unsigned: bool = True
    max_age: dt.timedelta | None = None
    trust_root: Path | None = None
    bundle: Path | None = None  # --bundle: the one feed file's signature, given by name


@dataclasses.dataclass(frozen=True)
class FeedFile:
    """One file of a feed, its sha256 and the checks of the signatures found beside it."""

    name: str
    sha256: str
    signatures: tuple[SignatureCheck, ...]


@dataclasses.dataclass(frozen=True)
class Feed:
    """A loaded feed: where it came from, its digest, its files and its validated records."""

    source: str
    digest: str
    files: tuple[FeedFile, ...]
    advisories: tuple[Advisory, ...]

    @property
    def newest(self) -> dt.datetime | None:
        """The newest `modified` time of its records (the feed's age is measured from it)."""
        return max((a.modified for a in self.advisories), default=None)

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source,
            "digest": self.digest,
            "advisories": len(self.advisories),
            "newest": format_time(self.newest) if self.newest else None,
            "files": [
                {"name": f.name, "sha256": f.sha256,
                 "signatures": [s.to_json() for s in f.signatures]}
                for f in self.files
            ],
        }


def is_url(source: str) -> bool:
    """Whether a feed source is written as a URL (any scheme, any case) rather than a path: a
    URL is never read from the working folder, and one that is not https is refused."""
    return has_scheme(source)


# --- reading ---------------------------------------------------------------------------------


def _is_signature(path: Path) -> bool:
    return path.name.endswith(SIGNATURE_SUFFIXES)


def _signature_checks(path: Path, data: bytes, rules: FeedRules, label: str
                      ) -> tuple[SignatureCheck, ...]:
    """Check every signature beside `path`; `data` is what was parsed (the file must still hold
    exactly that afterwards, so what was verified is what was read)."""
    checks = []
    bundles = ([rules.bundle] if rules.bundle is not None
               else [path.with_name(path.name + s) for s in SIGNATURE_SUFFIXES])
    for bundle in bundles:
        if not (bundle.is_file() or bundle == rules.bundle):
            continue
        if is_key_bundle(bundle):
            checks.append(verify_key_signature(path, bundle, rules.signers.public_keys,
                                               subject=label))
        else:
            checks.append(verify_blob_bundle(data, bundle, rules.signers.identities,
                                             trust_root=rules.trust_root, subject=label))
    again = read_input(path, "advisory feed", MAX_FEED_BYTES) if checks else data
    if hashlib.sha256(again).digest() != hashlib.sha256(data).digest():
        raise InputError(f"advisory feed {label}: changed while it was being read")
    return tuple(checks)


def _parse_json(data: bytes, label: str) -> list[Advisory]:
    return parse_advisories(loads_json(data, label), label)


def _read_zip(data: bytes, label: str) -> list[Advisory]:
    """osv.dev's per-ecosystem `all.zip`: one record per `*.json` member, read in memory (never
    extracted), each member and the uncompressed total capped against zip bombs."""
    advisories, total = [], 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in sorted(archive.infolist(), key=lambda m: m.filename):
                if member.is_dir() or not member.filename.endswith(".json"):
                    continue
                total += member.file_size
                if total > MAX_ZIP_BYTES:
                    raise InputError(f"{label}: more than {MAX_ZIP_BYTES} bytes uncompressed")
                if member.file_size > MAX_RECORD_BYTES:
                    raise InputError(f"{label}:{member.filename}: over the {MAX_RECORD_BYTES}"
                                     "-byte limit of one record")
                with archive.open(member) as handle:  # the size in the header may lie
                    record = handle.read(MAX_RECORD_BYTES + 1)
                if len(record) > MAX_RECORD_BYTES:
                    raise InputError(f"{label}:{member.filename}: over the {MAX_RECORD_BYTES}"
                                     "-byte limit of one record")
                advisories += _parse_json(record, f"{label}:{member.filename}")
    except (OSError, zipfile.BadZipFile, EOFError) as error:
        raise InputError(f"cannot read advisory feed {label}: {error}") from None
    return advisories


def _read_file(path: Path, label: str) -> tuple[bytes, list[Advisory]]:
    data = read_input(path, "advisory feed", MAX_FEED_BYTES)
    if zipfile.is_zipfile(io.BytesIO(data)):
        return data, _read_zip(data, label)
    return data, _parse_json(data, label)


def read_feed(path: Path, rules: FeedRules, source: str | None = None) -> Feed:
    """Load a feed file or a folder of `*.json`/`*.zip` files, checking the signatures beside
    each."""
    source = source or str(path)
    if path.is_dir():
        members = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".json", ".zip")
                         and not _is_signature(p))
        if not members:
            raise InputError(f"advisory feed {source}: no *.json or *.zip file in the folder "
                             "(an empty feed never means clean)")
    elif path.is_file():
        members = [path]
    else:
        raise InputError(f"advisory feed {source}: no such file or folder")
    files, advisories = [], []
    for member in members:
        name = member.relative_to(path).as_posix() if path.is_dir() else member.name
        label = source if member == path else f"{source}/{name}"
        data, records = _read_file(member, label)
        checks = _signature_checks(member, data, rules, label)
        signed = bool(checks) and all(c.ok for c in checks)
        advisories += [dataclasses.replace(r, signed=signed) for r in records]
        files.append(FeedFile(name, hashlib.sha256(data).hexdigest(), checks))
    if path.is_dir():
        listing = "".join(f"{f.sha256}  {f.name}\n" for f in files).encode()
        digest = hashlib.sha256(listing).hexdigest()
    else:
        digest = files[0].sha256
    return Feed(source, f"sha256:{digest}", tuple(files), tuple(advisories))


# --- downloading -----------------------------------------------------------------------------


def download(url: str, dest: Path, *, max_bytes: int = MAX_FEED_BYTES,
             timeout: float = TIMEOUT_S, missing_ok: bool = False) -> bool:
    """Fetch `url` into `dest` whole or not at all; False when `missing_ok` and it is a 404."""
    chunks: list[bytes] = []
    if not bounded_download(url, chunks.append, what=FEED, max_bytes=max_bytes,
                            timeout=timeout, missing_ok=missing_ok):
        return False
    write_atomic(dest, b"".join(chunks))
    return True


def fetch_feed(url: str, folder: Path, rules: FeedRules, *, timeout: float = TIMEOUT_S) -> Feed:
    """Download a feed and any signature beside it into `folder`, then read it."""
    name = PurePosixPath(urlsplit(url).path).name or "feed.json"
    dest = folder / name
    download(url, dest, timeout=timeout)
    for suffix in SIGNATURE_SUFFIXES:
        download(url + suffix, folder / (name + suffix), timeout=timeout, missing_ok=True)
    return read_feed(dest, rules, source=url)


def load_feed(source: str, rules: FeedRules, folder: Path) -> Feed:
    """A feed from a path or URL (`folder`: where downloads go, one sub-folder per feed)."""
    if not is_url(source):
        return read_feed(Path(source), rules)
    check_url(source, FEED)
    target = folder / hashlib.sha256(source.encode()).hexdigest()[:16]
    target.mkdir(parents=True, exist_ok=True)
    return fetch_feed(source, target, rules)


# --- judging ---------------------------------------------------------------------------------


def feed_problems(feed: Feed, rules: FeedRules, now: dt.datetime) -> list[str]:
    """Why a feed cannot be trusted (empty: it can): a signature that fails, an unsigned file
    where signatures are required, or a feed older than `rules.max_age`."""
    problems = []
    for file in feed.files:
        for check in file.signatures:
            if not check.ok:
                problems.append(f"{check.subject}: signature {Path(check.signature).name} "
                                f"refused: {check.reason}")
        if not file.signatures and not rules.allow_unsigned:
            problems.append(f"{feed.source}: {file.name} is not signed, and unsigned feeds "
                            "are not accepted")
    if rules.max_age is not None:
        newest = feed.newest
        if newest is None:
            problems.append(f"{feed.source}: no record, so its age cannot be shown")
        elif now - newest > rules.max_age:
            days = (now - newest).days
            problems.append(f"{feed.source}: stale: newest record modified "
                            f"{format_time(newest)} ({days} days ago, more than the maximum "
                            f"{rules.max_age.days} days): re-check the advisories before "
                            "production use")
    return problems


def signed_by(feeds: Sequence[Feed]) -> list[str]:
    """Every signer that verified a file of these feeds."""
    return sorted({s.signer for f in feeds for file in f.files for s in file.signatures
                   if s.ok and s.signer})
