"""Outputs never replace inputs: `gate --out X --lock X` must not overwrite the lockfile.

Every command that writes a file checks its outputs against what it reads before any work: an
output that is one of the input files (the same path, or the same file through a link), or that
lies inside an input folder (a verified model folder would change under its own approval), is
an `InputError` (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from dflash_guard.errors import InputError


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
