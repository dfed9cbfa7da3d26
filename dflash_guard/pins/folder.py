"""List a model folder safely: every regular file by relative path, unsafe entries reported.

Used by `lock` (local sources) and `verify` alike. A symlink may point only inside `boundary`
(the folder itself, or the repo folder of an HF-cache snapshot, whose files link to
`../../blobs/...`). Symlinked folders, links that escape, dangling links and special files are
reported, never followed.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

# Bookkeeping folders that tools write next to model files; never part of a model.
IGNORED_DIRS = frozenset({".git", ".cache"})


@dataclasses.dataclass(frozen=True)
class Unsafe:
    """An entry that must not be trusted: `kind` is `symlink` or `path`."""

    path: str
    kind: str
    detail: str


def _inside(path: str, boundary: str) -> bool:
    return path == boundary or path.startswith(boundary.rstrip(os.sep) + os.sep)


def list_folder(root: Path, boundary: Path | None = None) -> tuple[dict[str, Path], list[Unsafe]]:
    """Regular files under `root` by POSIX relative path, and the entries refused."""
    files: dict[str, Path] = {}
    unsafe: list[Unsafe] = []
    fence = os.path.realpath(boundary if boundary is not None else root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        keep = []
        for name in sorted(dirnames):
            full = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            if os.path.islink(full):
                unsafe.append(Unsafe(rel, "symlink", f"symlinked folder -> {os.readlink(full)}"))
            elif not (rel_dir == "." and name in IGNORED_DIRS):
                keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            if os.path.islink(full):
                real = os.path.realpath(full)
                if not _inside(real, fence):
                    unsafe.append(Unsafe(rel, "symlink", f"points outside: {os.readlink(full)}"))
                    continue
                if not os.path.isfile(real):
                    unsafe.append(Unsafe(rel, "symlink", f"dangling: {os.readlink(full)}"))
                    continue
            elif not os.path.isfile(full):
                unsafe.append(Unsafe(rel, "path", "not a regular file"))
                continue
            files[rel] = Path(full)
    return files, unsafe
