"""Helpers for the policy, signing, provenance and gate tests (imported by name:
never `from conftest import`, which is ambiguous across test folders)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.fixtures import LockedPair

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



# --- the gate's fixture pair -----------------------------------------------------------------

GATE_PROMPTS = [
    {"id": "code", "prompt": "def binary_search(items, target):\n    lo, hi = 0, len(items)\n"},
    {"id": "loop", "prompt": "total = 0\nfor i in range(10):\n    total = total + i * "},
]
SMALL_DIFFTEST = ("  prompts: builtin\n  max_new_tokens: 32\n",
                  "  prompts: prompts.jsonl\n  max_new_tokens: 8\n")


def release_map(url: str, release: str, commit: str) -> tuple[str, str]:
    """A `write_policy` replacement pinning `commit` as `release` of the engine repository `url`
    (`engines.repositories`): the evidence a release needs (issue 45), never the lock's label."""
    return ("  require_release: false\n",
            f"  require_release: false\n  repositories:\n    - upstream: {url}\n"
            f"      releases: {{{release}: {commit}}}\n")


def engines_section(url: str, release: str, commit: str) -> str:
    """The `engines:` section of a policy that extends `default`, with `release_map`'s pin."""
    return ("engines:\n  allow_pr_head: true\n  require_release: false\n  repositories:\n"
            f"    - upstream: {url}\n      releases: {{{release}: {commit}}}\n")


def fixture_code_sha256() -> str:
    """The sha256 of the fixture drafter's remote code (`dflash.py`, named by its auto_map)."""
    from kernels_ref.fixtures import WEIGHTS

    return hashlib.sha256((WEIGHTS / "dflash.py.txt").read_bytes()).hexdigest()


def write_policy(folder: Path, *replacements: tuple[str, str], base: str | None = None,
                 reviewed: tuple[str, ...] = ()) -> Path:
    """A policy file in `folder`: the default (or `base` text) with the small diff-test
    settings and `replacements` applied, its two-prompt JSONL set, and the fixture drafter's
    code (plus `reviewed` sha256s) on the reviewed list."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in GATE_PROMPTS))
    text = base if base is not None else DEFAULT_POLICY.read_text()
    entries = "".join(
        f"  - sha256: {sha}\n    path: reviewed.py\n    reviewer: test@example.com\n"
        "    date: 2026-09-01\n"
        for sha in (fixture_code_sha256(), *reviewed)
    )
    for old, new in (SMALL_DIFFTEST, ("reviewed_code: []\n", f"reviewed_code:\n{entries}"),
                     *replacements):
        assert old in text, old
        text = text.replace(old, new, 1)
    path = folder / "policy.yaml"
    path.write_text(text)
    return path


def write_lock(lock: Any, path: Path) -> Path:
    from dflash_guard.pins.lockfile import write_lockfile

    write_lockfile(lock, path)
    return path


def copy_folder(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


def relock(pair: LockedPair, drafter: Path) -> Any:
    """The pair's lock with the drafter re-locked from another folder."""
    from dflash_guard.pins.resolve import build_lock

    return build_lock({"target": str(pair.target), "drafter": str(drafter)}).lock


def as_hub(artifact: Any, repo: str, commit: str = "c" * 40, revision: str | None = None) -> Any:
    """The same locked files, presented as a Hub artifact `repo@commit` whose provenance was
    confirmed against the Hub."""
    return dataclasses.replace(artifact, source="hub", provenance="hub-confirmed", repo=repo,
                               commit=commit,
                               revision=commit if revision is None else revision, name=None)


def with_artifact(lock: Any, artifact: Any) -> Any:
    others = tuple(a for a in lock.artifacts if a.role != artifact.role)
    return dataclasses.replace(lock, artifacts=(*others, artifact))


def sign_model_folder(folder: Path, private_key: Path) -> Path:
    """Sign a model folder as its publisher would (OpenSSF Model Signing, ECDSA key), leaving
    the signature itself out of what is signed, as the model_signing CLI does."""
    from model_signing import hashing, signing

    sig = folder / "model.sig"
    config = hashing.Config().set_ignored_paths(paths=[sig.name])
    signing.Config().set_hashing_config(config).use_elliptic_key_signer(
        private_key=private_key).sign(folder, sig)
    return sig


LOCK_SIGNERS = "  lockfile: {identities: [], public_keys: []}"


def signed_lock(lock: Any, folder: Path) -> tuple[Path, tuple[str, str]]:
    """`lock` written to `folder/dflash.lock` and signed with a fresh key, and the policy
    replacement that accepts that key for lockfiles (so its hub-confirmed claims count)."""
    from dflash_guard.trust.signing import sign_with_key

    folder.mkdir(parents=True, exist_ok=True)
    path = write_lock(lock, folder / "dflash.lock")
    private, public = make_key_pair(folder, "lock")
    sign_with_key(path, private)
    return path, (LOCK_SIGNERS, f"  lockfile: {{identities: [], public_keys: [{public}]}}")


def recorded(record: Path, check: str) -> Any:
    """The evidence an approval record holds for one check (None: skipped or not run)."""
    from dflash_guard.trust.provenance import read_approval

    rows = read_approval(record)["predicate"]["checks"]
    return next((row["evidence"] for row in rows if row["name"] == check), None)
