"""A local git clone, asked questions with git itself, that changes no answer and runs nothing.

The clone may come from a CI cache or a pull request. Every git command runs with `GIT_ENV` and
`GIT_OVERRIDES`: no system or global config, no promisor (lazy) fetch, which would run the
clone's `core.sshCommand` or an `ext::` transport, no transport at all, no hooks, no fsmonitor,
no replace refs (which rewrite ancestry). A clone that sets a repository extension (a partial
clone), has a promisor remote or borrows objects through `objects/info/alternates` is refused.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dflash_guard.errors import InputError

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_NO_LAZY_FETCH": "1",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ALLOW_PROTOCOL": "",
    "GIT_OPTIONAL_LOCKS": "0",
}
GIT_OVERRIDES = (
    "core.fsmonitor=false", "core.hooksPath=/dev/null", "core.sshCommand=false",
    "core.gitProxy=false", "protocol.allow=never", "core.alternateRefsCommand=false",
    "uploadpack.packObjectsHook=false", "core.askPass=false", "credential.helper=",
)
MAX_TAG_BYTES = 1 << 20


def git_environment() -> dict[str, str]:
    """The environment every git command runs with (the caller's, less any `GIT_*`)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {**base, **GIT_ENV}


class GitClone:
    """A local clone, asked about ancestry with `git merge-base --is-ancestor` (git itself),
    under `GIT_ENV` and `GIT_OVERRIDES`; a clone with a partial-clone or other extension, or
    alternates, is refused."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if self._git("rev-parse", "--git-dir").returncode != 0:
            raise InputError(f"--engine-repo: {path} is not a git repository")
        self._refuse_extensions()

    def _refuse_extensions(self) -> None:
        listing = self._git("config", "--local", "--list").stdout.splitlines()
        for line in listing:
            key, _, value = line.partition("=")
            key = key.casefold()
            if key.startswith("extensions.") or (key == "core.repositoryformatversion"
                                                 and value.strip() not in ("", "0")):
                raise InputError(f"--engine-repo {self.path}: the clone sets {key}; only a "
                                 "plain full clone is read (a partial clone would fetch, and "
                                 "run the clone's transport settings)")
            if key.startswith("remote.") and key.endswith(".promisor"):
                raise InputError(f"--engine-repo {self.path}: the clone has a promisor remote "
                                 f"({key}); only a plain full clone is read")
        git_dir = self._git("rev-parse", "--git-common-dir").stdout.strip()
        alternates = (self.path / git_dir / "objects" / "info" / "alternates"
                      if git_dir else None)
        if alternates is not None and (alternates.exists() or alternates.is_symlink()):
            raise InputError(f"--engine-repo {self.path}: the clone borrows objects from "
                             "another repository (objects/info/alternates); use a full clone")

    def _git(self, *args: str) -> subprocess.CompletedProcess[str]:
        overrides = [arg for setting in GIT_OVERRIDES for arg in ("-c", setting)]
        command = ["git", *overrides, "-C", str(self.path), *args]
        try:
            return subprocess.run(command, capture_output=True, text=True, check=False,
                                  timeout=60, env=git_environment(), stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise InputError(f"cannot run git in {self.path}: {error}") from None

    def has(self, commit: str) -> bool:
        """Whether the clone holds `commit` (a full hash)."""
        return self._git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0

    def is_ancestor(self, older: str, newer: str) -> bool:
        """`older` is `newer` or one of its ancestors."""
        result = self._git("merge-base", "--is-ancestor", older, newer)
        if result.returncode not in (0, 1):
            raise InputError(f"git merge-base in {self.path}: {result.stderr.strip()}")
        return result.returncode == 0

    def tag_objects_at(self, commit: str) -> list[str]:
        """The annotated tag objects whose tagged object is `commit` (lightweight tags, mere
        refs, are not listed)."""
        result = self._git("for-each-ref", f"--points-at={commit}",
                           "--format=%(objecttype) %(objectname)", "refs/tags")
        if result.returncode != 0:
            return []
        return sorted({oid for kind, _, oid in (line.partition(" ")
                                                for line in result.stdout.splitlines())
                       if kind == "tag"})

    def tag_object(self, oid: str) -> bytes:
        """The raw bytes of a tag object (headers, message and any signature)."""
        overrides = [arg for setting in GIT_OVERRIDES for arg in ("-c", setting)]
        try:
            result = subprocess.run(["git", *overrides, "-C", str(self.path), "cat-file", "tag",
                                     oid], capture_output=True, check=False, timeout=60,
                                    env=git_environment(), stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise InputError(f"cannot run git in {self.path}: {error}") from None
        if result.returncode != 0 or len(result.stdout) > MAX_TAG_BYTES:
            raise InputError(f"--engine-repo {self.path}: cannot read tag object {oid[:12]}")
        return result.stdout
