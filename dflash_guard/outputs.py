"""Outputs never replace inputs: `gate --out X --lock X` must not overwrite the lockfile.

Every command that writes a file checks its outputs against what it reads before any work: an
output that is one of the input files (the same path, or the same file through a link), or that
lies inside an input folder (a verified model folder would change under its own approval), is
an `InputError` (exit 2).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.fileio import file_kind


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare the paths
        return os.path.realpath(a) == os.path.realpath(b)


def _inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def refuse_outputs_over_inputs(
    outputs: Iterable[tuple[str, Path | None]], inputs: Iterable[tuple[str, Path | None]]
) -> None:
    """Raise `InputError` when an output (`(option, path)`) is an input file or lies inside an
    input folder; `None` entries are options not given."""
    given = [(name, Path(path)) for name, path in inputs if path is not None]
    for out_name, out in ((n, Path(p)) for n, p in outputs if p is not None):
        for in_name, source in given:
            if source.is_dir() and _inside(out, source):
                raise InputError(f"{out_name} {out}: inside the input folder {in_name} {source}; "
                                 "write it elsewhere")
            if not source.is_dir() and _same_file(out, source):
                raise InputError(f"{out_name} {out}: is the input {in_name} {source}; refusing "
                                 "to overwrite an input")


def refuse_unwritable(outputs: Iterable[tuple[str, Path | None]]) -> None:
    """Raise `InputError` for an output (`(option, path)`) that could not be written: its folder
    missing, not a folder or not writable, or the path itself something other than a regular
    file (the atomic writer replaces nothing else). Run before any work, so a long run never
    ends in "cannot write"."""
    for name, out in ((n, Path(p)) for n, p in outputs if p is not None):
        folder = out.parent
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise InputError(f"{name} {out}: the folder {folder} {what}")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError(f"{name} {out}: the folder {folder} is not writable")
        try:
            mode = os.lstat(out).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise InputError(f"{name} {out}: cannot write: it is {file_kind(mode)}; refusing to "
                             "replace anything but a regular file")
