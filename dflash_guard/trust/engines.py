"""Which engine a locked commit is, and whether it is a release: from evidence, never from text.

A lock's engine entry (its name, URL and `#ref` label) is text anyone can write, and a clone
given with `--engine-repo` is a folder anyone can make: its branches, its remote URL and its
lightweight tags are names, not proof. What counts:

- **Identity** (which upstream's advisories apply): the commit is one the policy pins as an
  upstream's release (`engines.repositories[].releases`; a commit hash names content); or the
  URL is a known upstream's (`UPSTREAMS`) or a mirror the policy declares for one
  (`engines.repositories[].mirrors`). A URL spelled any other way proves nothing: the engine's
  identity is unproven, and every advisory about an engine is undecided for it.
- **Release**: the commit is pinned in the policy's release map for the engine's upstream, or a
  clone holds an annotated tag at the commit signed (SSH signature, checked with `ssh-keygen -Y
  verify`) by a key the policy lists for that upstream (`tag_signers`); the release's name is
  the one inside the signed tag object, never the ref's name.
- **Mainline**: the commit is an ancestor of a proven release commit, on the clone's commit
  graph (commit hashes chain, so ancestry is content). A label (`#main`) or no label proves
  nothing: an engine proven neither a release nor mainline counts as an unproven build.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import serialization

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input
from dflash_guard.pins.lockfile import Engine
from dflash_guard.trust.gitclone import GitClone
from dflash_guard.urls import repo_key

if TYPE_CHECKING:
    from dflash_guard.schema import Field

PR_HEAD_RE = re.compile(r"(^|/)(pull|pulls|merge-requests)/\d+(/|$)|^(pr|#)[-/#]?\d+$",
                        re.IGNORECASE)
# Semantic-version release names, and llama.cpp's build tags (`b4567`).
RELEASE_RE = re.compile(r"^(refs/tags/)?(v?\d+(\.\d+)+([.\-+]?[0-9A-Za-z.]+)?|b\d+)$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
MAX_KEY_BYTES = 16 * 1024
SIGNATURE_START = "-----BEGIN SSH SIGNATURE-----"


@dataclasses.dataclass(frozen=True)
class Upstream:
    """A known engine repository: how reports name it, the packages it is released as
    (OSV ecosystem, canonical name) and the other spellings of its URL (renames)."""

    name: str
    packages: frozenset[tuple[str, str]] = frozenset()
    renamed_from: tuple[str, ...] = ()


# llama.cpp publishes no package (its `bNNNN` build tags are git tags: GIT ranges decide it).
# ollama's PR builds and releases are pinned by commit (`lock --engine ollama=URL@SHA#REF`).
UPSTREAMS: Mapping[str, Upstream] = {
    "github.com/vllm-project/vllm": Upstream("vllm", frozenset({("PyPI", "vllm")})),
    "github.com/sgl-project/sglang": Upstream("sglang", frozenset({("PyPI", "sglang")})),
    "github.com/ggml-org/llama.cpp": Upstream("llama.cpp",
                                              renamed_from=("github.com/ggerganov/llama.cpp",)),
    # ollama is a Go module; OSV lists its advisories under that ecosystem
    "github.com/ollama/ollama": Upstream("ollama",
                                         frozenset({("Go", "github.com/ollama/ollama")})),
}
ENGINE_PACKAGES = frozenset(p for u in UPSTREAMS.values() for p in u.packages)


@dataclasses.dataclass(frozen=True)
class Repository:
    """One `engines.repositories` entry: an upstream (by URL), the mirrors accepted as it,
    its releases (name -> commit) and the public keys whose signed tags prove a release."""

    upstream: str  # repo_key of the upstream URL
    mirrors: tuple[str, ...] = ()  # repo_keys
    releases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tag_signers: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class EngineRules:
    """The policy's evidence about engines (`engines.repositories`); empty by default."""

    repositories: tuple[Repository, ...] = ()

    def files(self) -> list[tuple[str, Path]]:
        """The key files these rules name (for the policy's closure)."""
        return [("engines.repositories.tag_signers", key)
                for repo in self.repositories for key in repo.tag_signers]

    def aliases(self) -> dict[str, str]:
        """repo_key of every accepted spelling -> the upstream it names."""
        known = {key: key for key in UPSTREAMS}
        known |= {old: key for key, up in UPSTREAMS.items() for old in up.renamed_from}
        for repo in self.repositories:
            known.setdefault(repo.upstream, repo.upstream)
            known |= dict.fromkeys(repo.mirrors, repo.upstream)
        return known


NO_RULES = EngineRules()


def parse_engine_rules(field: Field | None) -> EngineRules:
    """`engines.repositories`: a list of `{upstream: URL, mirrors: [URL], releases: {NAME:
    COMMIT}, tag_signers: [KEY FILE]}` (upstream required)."""
    if field is None or field.is_null:
        return NO_RULES
    repositories, seen = [], set()
    for item in field.items():
        f = item.mapping(("upstream", "mirrors", "releases", "tag_signers"), ("upstream",))
        upstream = repo_key(f["upstream"].text(lambda v: "/" in v, "a repository URL"))
        if upstream in seen:
            raise f["upstream"].fail(f"{upstream} is listed twice")
        seen.add(upstream)
        mirrors = tuple(repo_key(m.text(lambda v: "/" in v, "a repository URL"))
                        for m in (f["mirrors"].items() if "mirrors" in f else []))
        releases: dict[str, str] = {}
        if "releases" in f and not f["releases"].is_null:
            value = f["releases"].value()
            if not isinstance(value, dict):
                raise f["releases"].fail("expected a mapping of release name to 40-hex commit")
            for name, commit in value.items():
                if not (isinstance(name, str) and RELEASE_RE.match(name)):
                    raise f["releases"].fail(f"{name!r} is not a release name (v1.2.3, b4567)")
                if not (isinstance(commit, str) and COMMIT_RE.match(commit)):
                    raise f["releases"].fail(f"{name}: {commit!r} is not a 40-hex commit")
                releases[name] = commit
        keys = []
        for key in f["tag_signers"].items() if "tag_signers" in f else []:
            path = key.path()
            if not path.is_file():
                raise key.fail(f"public key file {path} not found")
            keys.append(path)
        repositories.append(Repository(upstream, mirrors, releases, tuple(keys)))
    return EngineRules(tuple(repositories))


@dataclasses.dataclass(frozen=True)
class EngineBuild:
    """What is proven of a locked engine commit: which upstream it is (None: unproven), the
    release it is (None: none proven), whether it is mainline, and how that was decided."""

    identity: str | None
    version: str | None
    mainline: bool
    how: str
    label_pr: bool = False  # the lock's label names a pull request

    @property
    def release(self) -> bool:
        return self.version is not None

    @property
    def pr_head(self) -> bool:
        """A build proven neither a release nor mainline: a PR head or unproven (treated alike;
        the label only words it)."""
        return not (self.release or self.mainline)

    @property
    def packages(self) -> frozenset[tuple[str, str]]:
        up = UPSTREAMS.get(self.identity or "")
        return up.packages if up is not None else frozenset()


def _ssh_key_line(path: Path) -> str:
    """A public key file (OpenSSH line or PEM) as an OpenSSH `TYPE BASE64` line."""
    data = read_input(path, "tag signer key", MAX_KEY_BYTES)
    try:
        key = (serialization.load_ssh_public_key(data) if data.lstrip().startswith(b"ssh-")
               else serialization.load_pem_public_key(data))
        line = key.public_bytes(serialization.Encoding.OpenSSH,
                                serialization.PublicFormat.OpenSSH)
    except (ValueError, TypeError, AttributeError) as error:
        raise InputError(f"{path}: not a public key usable for SSH signatures ({error})") from None
    return line.decode()


def _verify_ssh(payload: bytes, signature: bytes, keys: tuple[Path, ...]) -> bool:
    """Whether `signature` (an SSHSIG, namespace `git`) over `payload` is by one of `keys`."""
    with tempfile.TemporaryDirectory(prefix="dflash-guard-tag-") as tmp:
        allowed, sig = Path(tmp) / "allowed_signers", Path(tmp) / "tag.sig"
        allowed.write_text("".join(f'release-signer namespaces="git" {_ssh_key_line(k)}\n'
                                   for k in keys))
        sig.write_bytes(signature)
        try:
            result = subprocess.run(
                ["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "release-signer",
                 "-n", "git", "-s", str(sig)],
                input=payload, capture_output=True, check=False, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise InputError(f"cannot run ssh-keygen to check a signed tag: {error}") from None
    return result.returncode == 0


def signed_release(repo: GitClone, commit: str, keys: tuple[Path, ...]) -> str | None:
    """The release name of an annotated tag at `commit` whose SSH signature verifies against
    `keys`: the `tag` header and `object` inside the signed object decide, not the ref."""
    for oid in repo.tag_objects_at(commit):
        raw = repo.tag_object(oid)
        text = raw.decode("utf-8", "replace")
        start = text.find(SIGNATURE_START)
        if start < 0:
            continue
        headers = dict(line.split(" ", 1) for line in text[:text.find("\n\n")].splitlines()
                       if " " in line)
        name = headers.get("tag", "")
        if headers.get("object") != commit or headers.get("type") != "commit" or not (
                RELEASE_RE.match(name)):
            continue
        cut = raw.find(SIGNATURE_START.encode())
        if _verify_ssh(raw[:cut], raw[cut:], keys):
            return name
    return None


def _release_by_map(commit: str, rules: EngineRules) -> tuple[str, str] | None:
    """(upstream, release name) when the policy's release map pins `commit`."""
    for repo in rules.repositories:
        for name, pinned in sorted(repo.releases.items()):
            if pinned == commit:
                return repo.upstream, name
    return None


def engine_build(engine: Engine, clone: Path | None, rules: EngineRules = NO_RULES
                 ) -> EngineBuild:
    """What the evidence proves of `engine` (see the module docstring); `InputError` when the
    clone given for it does not hold the commit."""
    repo = GitClone(clone) if clone is not None else None
    if repo is not None and not repo.has(engine.commit):
        raise InputError(f"--engine-repo {engine.name}: commit {engine.commit[:12]} is not in "
                         f"the clone {clone}")
    aliases = rules.aliases()
    identity = aliases.get(repo_key(engine.url))
    ref = engine.ref or ""
    label_pr = bool(ref) and PR_HEAD_RE.search(ref) is not None
    mapped = _release_by_map(engine.commit, rules)
    if mapped is not None:
        return EngineBuild(mapped[0], mapped[1], True,
                           f"release {mapped[1]} of {mapped[0]} (the policy's release map)",
                           label_pr)
    if repo is not None:
        for entry in rules.repositories:
            if entry.tag_signers and (name := signed_release(repo, engine.commit,
                                                              entry.tag_signers)):
                return EngineBuild(entry.upstream, name, True,
                                   f"release {name} of {entry.upstream} (tag signed by a policy "
                                   "tag signer)", label_pr)
        for entry in rules.repositories:
            if identity not in (None, entry.upstream):
                continue
            for name, release in sorted(entry.releases.items()):
                if repo.has(release) and repo.is_ancestor(engine.commit, release):
                    return EngineBuild(entry.upstream, None, True,
                                       f"mainline: an ancestor of release {name} of "
                                       f"{entry.upstream} (commit graph of {clone})", label_pr)
    label = f"label {ref or 'none'!r} proves nothing"
    if identity is None:
        why = (f"{label}; {repo_key(engine.url)} is no known upstream nor a mirror the policy "
               "lists (engines.repositories), and no release map pins the commit")
    else:
        why = (f"{label}; no release map entry or policy-signed tag proves a release of "
               f"{identity}" + ("" if repo is not None else f" (a clone, --engine-repo "
                                f"{engine.name}=CLONE, can show a signed tag or mainline "
                                "ancestry)"))
    return EngineBuild(identity, None, False, why, label_pr)
