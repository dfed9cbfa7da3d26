"""Whether the dflash wheel lockfiles/dflash-client.lock pins is at hand here (`make` keeps it
in .wheelhouse/), which decides whether `verify-installed dflash` can prove the install (OK,
exit 0) or cannot tell (exit 1)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from dflash_guard.pins.lockfile import load_lockfile
from dflash_guard.trust.installed import pip_cache_dir, pip_cache_files

REPO = Path(__file__).resolve().parents[2]
CLIENT_LOCK = REPO / "lockfiles" / "dflash-client.lock"


def dflash_wheel_at_hand(cwd: Path = REPO) -> bool:
    """A file in `cwd`/.wheelhouse or pip's cache with the sha256 the lock pins for dflash."""
    (package,) = [p for p in load_lockfile(CLIENT_LOCK).packages if p.name == "dflash"]
    folder = cwd / ".wheelhouse"
    found = [*(folder.glob("*.whl") if folder.is_dir() else []),
             *pip_cache_files(pip_cache_dir())]
    return any(hashlib.sha256(path.read_bytes()).hexdigest() in package.sha256
               for path in found if path.stat().st_size < 1 << 26)  # dflash is small
