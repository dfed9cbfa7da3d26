"""`verify-app`: an Apple-signed disk image verified offline against the policy's pins.

In order: the koly trailer and the superblob it points at (`udif`); every code directory's one
code hash against the image up to its code limit, its rep-specific slot against the trailer and
its hashed special slots against the blobs beside it; the CMS signature over the primary code
directory, binding the alternates (`cms`); the signer's chain to a trusted root (Apple's roots
and Developer ID intermediates, or the policy's own `roots`) at the signing time and now; the
signer being a code-signing certificate of the team the policy pins. A stapled notarization
ticket is reported, not judged: its format is undocumented and its freshness needs Apple's
servers (docs/limits.md).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import importlib.resources
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard.errors import InputError
from dflash_guard.fileio import open_binary, read_input
from dflash_guard.trust.apple import udif
from dflash_guard.trust.apple.udif import SignatureError

if TYPE_CHECKING:
    from cryptography import x509

    from dflash_guard.trust.apple.cms import SignedCms
    from dflash_guard.trust.apple.timestamp import Timestamp

APPLE_ROOTS = ("AppleIncRootCertificate.cer", "AppleRootCA-G2.cer", "AppleRootCA-G3.cer")
APPLE_INTERMEDIATES = ("DeveloperIDCA.cer", "DeveloperIDG2CA.cer")
APPLE_TIMESTAMP = ("AppleTimestampCA.cer",)
MAX_CERT_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class AppPins:
    """What the policy pins for an app image (`engines.omlx`): the team, optionally the
    identifier, and roots to trust instead of Apple's (a test or in-house chain)."""

    team_id: str | None = None
    identifier: str | None = None
    roots: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class Ticket:
    """A stapled notarization ticket, as far as it can be read offline."""

    size: int
    sha256: str
    magic: str
    names_cdhash: bool  # the ticket's bytes contain the primary code directory's cdhash


@dataclasses.dataclass(frozen=True)
class AppImageCheck:
    """The verdict on one disk image (`Report`): exit 0 when nothing is in `problems`."""

    image: str
    size: int
    sha256: str
    problems: tuple[str, ...]
    identifier: str | None = None
    team_id: str | None = None
    code_directories: tuple[tuple[str, str], ...] = ()  # (hash type, cdhash hex)
    signer: str | None = None
    chain: tuple[str, ...] = ()
    anchor: str | None = None  # "apple" or "policy"
    signing_time: str | None = None
    timestamp_token: bool = False  # an RFC 3161 token rides beside the signature
    timestamp: str | None = None  # its authority, when verified (signing_time is then its time)
    ticket: Ticket | None = None
    lock: str | None = None  # what the lock says of the image's sha256; None: no lock given

    @property
    def passed(self) -> bool:
        """Every check held."""
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {"passed": self.passed, "image": self.image, "size": self.size,
                "sha256": self.sha256, "identifier": self.identifier, "team_id": self.team_id,
                "code_directories": [{"hash": h, "cdhash": c} for h, c in self.code_directories],
                "signer": self.signer, "chain": list(self.chain), "anchor": self.anchor,
                "signing_time": self.signing_time, "timestamp_token": self.timestamp_token,
                "timestamp": self.timestamp,
                "ticket": dataclasses.asdict(self.ticket) if self.ticket else None,
                "lock": self.lock, "problems": list(self.problems)}


def load_certificates(paths: Sequence[Path], what: str) -> list[x509.Certificate]:
    """Certificates from PEM (one or more) or DER files; an `InputError` naming the file."""
    from cryptography import x509

    found = []
    for path in paths:
        data = read_input(path, what, MAX_CERT_BYTES)
        try:
            found.extend(x509.load_pem_x509_certificates(data) if b"-----BEGIN" in data
                         else [x509.load_der_x509_certificate(data)])
        except ValueError as error:
            raise InputError(f"{what} {path}: not a certificate ({error})") from None
    return found


def _vendored(names: Sequence[str]) -> list[x509.Certificate]:
    from cryptography import x509

    folder = importlib.resources.files("dflash_guard.trust.apple") / "certs"
    return [x509.load_der_x509_certificate((folder / name).read_bytes()) for name in names]


def verify_image(path: Path, pins: AppPins, *, now: dt.datetime | None = None,
                 locked: Sequence[str] | None = None) -> AppImageCheck:
    """Verify the disk image at `path` under `pins`; `locked`: the sha256 digests the lock
    pins for it (None: no lock given). An `InputError` when `path` is no disk image."""
    now = now or dt.datetime.now(dt.UTC)
    roots = load_certificates(pins.roots, "policy root") if pins.roots else None
    try:
        handle = open_binary(path)
    except OSError as error:
        raise InputError(f"cannot read image {path}: {error.strerror or error}") from None
    with handle:
        size = udif.image_size(handle)
        trailer = udif.read_trailer(handle, size, str(path))
        facts: dict[str, object] = {}
        problems: list[str] = []
        digests: dict[str, bytes] | None = None
        try:
            signature = udif.read_signature(handle, size, trailer)
            directories = signature.code_directories()
            digests = udif.digest_prefix(handle, trailer.signature_offset,
                                         {d.hash_name for d in directories})
            problems += _directory_problems(directories, signature, trailer, digests)
            facts.update(identifier=directories[0].identifier,
                         code_directories=tuple((d.hash_name, d.cdhash.hex())
                                                for d in directories),
                         ticket=_ticket(signature, directories[0]))
            try:
                problems += _signature_problems(signature, directories, pins, roots, now, facts)
            except (ValueError, TypeError) as error:  # a certificate cryptography reads lazily
                raise SignatureError("a certificate of the signature does not parse: "
                                     f"{str(error)[:200]}") from None
        except SignatureError as error:
            problems.append(str(error))
            if digests is None:  # the file's sha256 all the same
                digests = udif.digest_prefix(handle, 0, set())
    sha256 = digests["file-sha256"].hex()
    lock = None
    if locked is not None:
        lock = "pinned" if sha256 in locked else "not pinned"
        if sha256 not in locked:
            problems.append(f"the lock pins no image with sha256 {sha256} "
                            f"(it pins {', '.join(locked) or 'none'})")
    return AppImageCheck(image=str(path), size=size, sha256=sha256, problems=tuple(problems),
                         lock=lock, **facts)  # type: ignore[arg-type]


def _directory_problems(directories: list[udif.CodeDirectory], signature: udif.Signature,
                        trailer: udif.Trailer, digests: dict[str, bytes]) -> list[str]:
    """Each code directory's hashes against the image, the trailer and the blobs."""
    problems = []
    if not any(d.hash_name in udif.STRONG_HASHES for d in directories):
        problems.append("no code directory uses SHA-256 or SHA-384 (SHA-1 alone is refused)")
    for directory in directories:
        label = f"code directory {directory.slot:#x} ({directory.hash_name})"
        if directory.code_limit != trailer.signature_offset:
            problems.append(f"{label} covers {directory.code_limit} bytes, not the image up to "
                            f"its signature ({trailer.signature_offset})")
        elif directory.code_hashes[0] != digests[directory.hash_name][:directory.hash_size]:
            problems.append(f"{label}: the image's digest differs from the signed one (the "
                            "image was changed after signing)")
        rep = trailer.digest_for_code_directory(directory.hash_name)[:directory.hash_size]
        if directory.special.get(udif.SLOT_REP_SPECIFIC) != rep:
            problems.append(f"{label}: the trailer's digest (slot 6) differs from the signed "
                            "one")
        for slot, digest in directory.special.items():
            if slot == udif.SLOT_REP_SPECIFIC:
                continue
            blob = signature.blobs.get(slot)
            if blob is None:
                problems.append(f"{label}: special slot {slot} is hashed but the signature "
                                "has no such blob (a disk image has no bundle files)")
            elif hashlib.new(directory.hash_name, blob).digest()[:directory.hash_size] != digest:
                problems.append(f"{label}: blob {slot} differs from its signed digest")
        for slot in signature.blobs.keys() & udif.HASHED_BLOB_SLOTS - directory.special.keys():
            problems.append(f"{label}: blob {slot} is in the signature but not hashed")
    known = ({udif.SLOT_CODE_DIRECTORY, udif.SLOT_SIGNATURE, udif.SLOT_TICKET}
             | udif.HASHED_BLOB_SLOTS | set(udif.ALTERNATE_CODE_DIRECTORIES))
    for slot in sorted(signature.blobs.keys() - known):
        problems.append(f"the signature holds a blob in slot {slot:#x}, which disk images do "
                        "not use")
    identifiers = {d.identifier for d in directories}
    if len(identifiers) > 1:
        problems.append(f"the code directories name different identifiers: {sorted(identifiers)}")
    return problems


def _signature_problems(signature: udif.Signature, directories: list[udif.CodeDirectory],
                        pins: AppPins, roots: list[x509.Certificate] | None,
                        now: dt.datetime, facts: dict[str, object]) -> list[str]:
    """The CMS signature, the signer's chain, its kind and team, against `pins`."""
    from dflash_guard.trust.apple import cms

    der = signature.payload(udif.SLOT_SIGNATURE)
    if der is None:
        raise SignatureError("the image has a code directory but no CMS signature (ad hoc: "
                             "nobody signed it)")
    primary = directories[0]
    signed = cms.verify_cms(der, primary.raw)
    problems = []
    for directory in directories[1:]:
        if (directory.hash_name, directory.cdhash) not in signed.bound_cdhashes:
            problems.append(f"code directory {directory.slot:#x} is not bound by the CMS "
                            "signature's cdhashes attribute")
    leaf = signed.signer
    team = cms.team_of(leaf)
    apple = roots is None
    anchors = roots if roots is not None else _vendored(APPLE_ROOTS)
    stamp, stamp_problems = _timestamp(signed, apple, anchors, now)
    problems += stamp_problems
    when = stamp.gen_time if stamp is not None else signed.signing_time
    facts.update(signer=leaf.subject.rfc4514_string(), team_id=team,
                 signing_time=when.isoformat() if when else None,
                 timestamp_token=signed.timestamp_token is not None,
                 timestamp=None if stamp is None else stamp.authority.subject.rfc4514_string())
    try:
        chain = cms.build_chain(leaf, [*signed.certificates,
                                       *(_vendored(APPLE_INTERMEDIATES) if apple else [])],
                                anchors)
        facts.update(chain=tuple(chain.subjects), anchor="apple" if apple else "policy")
        if stamp is not None:  # a time the authority vouches for: validity then suffices
            problems += cms.chain_problems(chain, stamp.gen_time, "at its timestamp")
        else:  # the signer's own claim: valid then, and now
            if when is None:
                problems.append("the CMS signature has no signing time: validity is checked "
                                "now only")
            elif when > now:
                problems.append(f"the signing time {when:%Y-%m-%d %H:%M} UTC is in the future")
            else:
                problems += cms.chain_problems(chain, when, "at the signing time")
            problems += cms.chain_problems(chain, now, "now")
        if kind := cms.code_signing_problem(leaf, apple):
            problems.append(kind)
        if apple and not (len(chain.certificates) > 1
                          and cms.is_developer_id_ca(chain.certificates[1])):
            problems.append("the signer is not issued by a Developer ID intermediate")
    except ValueError as error:  # a malformed extension, read lazily by cryptography
        problems.append(f"a certificate of the signature does not parse: {str(error)[:200]}")
    except SignatureError as error:
        problems.append(str(error))
    if primary.team_id is not None and primary.team_id != team:
        problems.append(f"the code directory names team {primary.team_id}, the signer {team}")
    if pins.team_id is None:
        problems.append("the policy pins no team for this app (engines.omlx.team_id)")
    elif team != pins.team_id:
        problems.append(f"the signer's team is {team or 'not one organizational unit'}, the "
                        f"policy pins {pins.team_id}")
    if pins.identifier is not None and primary.identifier != pins.identifier:
        problems.append(f"the image's identifier is {primary.identifier}, the policy pins "
                        f"{pins.identifier}")
    return problems


def _timestamp(signed: SignedCms, apple: bool, anchors: list[x509.Certificate],
               now: dt.datetime) -> tuple[Timestamp | None, list[str]]:
    """The verified timestamp token beside the signature (None: none, or refused, with the
    reasons): its authority chained to `anchors` (through the Apple Timestamp CA under
    Apple's roots) and valid at the time it vouches for, which is not in the future."""
    from dflash_guard.trust.apple import cms
    from dflash_guard.trust.apple.timestamp import verify_timestamp

    if signed.timestamp_token is None:
        return None, []
    try:
        stamp = verify_timestamp(signed.timestamp_token, signed.signature)
        chain = cms.build_chain(stamp.authority, [
            *stamp.certificates, *(_vendored(APPLE_TIMESTAMP) if apple else [])], anchors)
        problems = cms.chain_problems(chain, stamp.gen_time, "at its own timestamp")
    except SignatureError as error:
        return None, [f"the timestamp token is refused: {error}"]
    except ValueError as error:  # a malformed extension, read lazily by cryptography
        return None, [f"the timestamp token is refused: a certificate does not parse "
                      f"({str(error)[:200]})"]
    if stamp.gen_time > now:
        problems.append(f"the timestamp {stamp.gen_time:%Y-%m-%d %H:%M} UTC is in the future")
    return (None if problems else stamp), problems


def _ticket(signature: udif.Signature, primary: udif.CodeDirectory) -> Ticket | None:
    data = signature.payload(udif.SLOT_TICKET)
    if data is None:
        return None
    return Ticket(size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                  magic=data[:4].decode("latin-1").encode("unicode_escape").decode(),
                  names_cdhash=primary.cdhash[:udif.CDHASH_BYTES] in data)
