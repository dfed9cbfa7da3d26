"""List a model folder safely: every regular file by relative path, unsafe entries reported.

This is the one walk: `lock` (local sources), `verify` and `scan` all call `list_folder`, so
the scanned set is the locked set, hidden folders included. Only `.git` and `.cache` at the top
of the folder are left out (bookkeeping of git and huggingface_hub, which no loader reads); a
folder of that name deeper down is walked like any other, and a weight index naming a shard in
such a folder is refused by the scan. A symlink may point only inside `boundary` (the folder
itself, or the repo folder of an HF-cache snapshot, whose files link to `../../blobs/...`).
Symlinked folders, links that escape, dangling links and special files are reported, never
followed. So is every folder that cannot be listed (no permission, a path past
PATH_MAX): its files would otherwise be silently left out, so the walk fails closed. The walk
keeps its own stack, so a folder thousands of levels deep is no recursion error.
"""

from __future__ import annotations

import dataclasses
import os
from operator import attrgetter

# Bookkeeping folders that tools write at the top of a model folder; never part of a model.
IGNORED_DIRS = frozenset({".git", ".cache"})

# Paths this long cannot be opened by name (ENAMETOOLONG): their files cannot be checked.
PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096


@dataclasses.dataclass(frozen=True)
class Unsafe:
    """An entry that must not be trusted: `kind` is `symlink` or `path`."""

    path: str
    kind: str
    detail: str


def _inside(path: str, boundary: str) -> bool:
    return path == boundary or path.startswith(boundary.rstrip(os.sep) + os.sep)


def _link_problem(full: str, fence: str) -> str | None:
    """Why the symlink at `full` must not be followed, or None when it names a file inside."""
    target = os.readlink(full)
    if os.path.isdir(full):
        return f"symlinked folder -> {target}"
    if not _inside(os.path.realpath(full), fence):
        return f"points outside: {target}"
    if not os.path.isfile(full):
        return f"dangling: {target}"
    return None


def absolute_root(root: str | os.PathLike[str]) -> str:
    """`root` as an absolute path naming the same folder, so every file's path is absolute as
    listed (a stat key needs no `abspath` per file): normalised when that cannot change the
    folder named, only prefixed with the working folder when a `..` part follows what may be a
    symlink."""
    name = os.fspath(root)
    if ".." in name.split("/"):
        return name if name.startswith("/") else os.path.join(os.getcwd(), name)
    return os.path.abspath(name)


def list_folder(root: str | os.PathLike[str],
                boundary: str | os.PathLike[str] | None = None,
                ) -> tuple[dict[str, str], list[Unsafe]]:
    """Regular files under `root` by POSIX relative path (each as `root` joined with it), and
    the entries refused. Paths stay strings: a `Path` per file costs more than the walk."""
    files: dict[str, str] = {}
    unsafe: list[Unsafe] = []
    fence = os.path.realpath(boundary if boundary is not None else root)
    stack: list[tuple[str, str]] = [(os.fspath(root), "")]
    while stack:
        folder, rel_dir = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=attrgetter("name"))
        except OSError as error:
            reason = error.strerror or type(error).__name__
            unsafe.append(Unsafe(rel_dir or ".", "path",
                                 f"folder cannot be listed ({reason}): its files are unchecked"))
            continue
        prefix = f"{rel_dir}/" if rel_dir else ""
        # A name encodes to at most 4 bytes a character: only a folder path this close to
        # PATH_MAX needs each entry's length measured.
        near_limit = len(os.fsencode(folder)) + 1 + 4 * max(
            (len(entry.name) for entry in entries), default=0) >= PATH_MAX
        subfolders = []
        for entry in entries:
            rel = prefix + entry.name
            if near_limit and len(os.fsencode(entry.path)) >= PATH_MAX:
                unsafe.append(Unsafe(rel, "path", f"path longer than PATH_MAX ({PATH_MAX}): "
                                                  "it cannot be opened, so it is unchecked"))
                continue
            try:
                if entry.is_symlink():
                    if problem := _link_problem(entry.path, fence):
                        unsafe.append(Unsafe(rel, "symlink", problem))
                    else:
                        files[rel] = entry.path
                elif entry.is_dir(follow_symlinks=False):
                    if not (rel_dir == "" and entry.name in IGNORED_DIRS):
                        subfolders.append((entry.path, rel))
                elif entry.is_file(follow_symlinks=False):
                    files[rel] = entry.path
                else:
                    unsafe.append(Unsafe(rel, "path", "not a regular file"))
            except OSError as error:
                unsafe.append(Unsafe(rel, "path", f"cannot be read ({error.strerror or error})"))
        stack.extend(reversed(subfolders))
    return files, unsafe
