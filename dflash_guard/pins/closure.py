"""A deploy lock's packages as a set pip can install with `--require-hashes`: closed under
their dependencies.

pip's hash-checking mode installs exactly the listed pins and refuses a requirement that
brings in anything unlisted (`all requirements must have their versions pinned with ==`), so a
package locked without its dependencies exports a file pip refuses. A wheel says what it needs
(`Requires-Dist` in its METADATA, markers evaluated for this interpreter, no extras); each need
is met by a locked package whose version satisfies it, else by the best compatible wheel found
beside the wheels given (a local wheel folder), which is locked in turn. What is still missing
is a refusal that names it. A package given only as `NAME==VERSION@sha256:HEX` has no
METADATA to read: its dependencies cannot be checked here (`unchecked`).
"""

from __future__ import annotations

import dataclasses
import zipfile
from collections.abc import Iterable
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from dflash_guard.errors import InputError
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.pins.lockfile import Package

MAX_METADATA_BYTES = 4 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Closure:
    """The packages to lock (the given ones plus the wheels found for their needs), the needs
    nothing meets (`missing`: "package X needs Y"), and the given packages with no wheel to
    read their needs from (`unchecked`)."""

    packages: tuple[Package, ...]
    missing: tuple[str, ...]
    unchecked: tuple[str, ...]


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The `Requires-Dist` of `wheel` that apply here (markers for this interpreter, no extra
    asked for); an unreadable wheel or requirement is an `InputError`."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist()
                     if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise InputError(f"--package {wheel.name}: not a wheel (no one "
                                 "*.dist-info/METADATA)")
            info = archive.getinfo(names[0])
            if info.file_size > MAX_METADATA_BYTES:
                raise InputError(f"--package {wheel.name}: METADATA over "
                                 f"{MAX_METADATA_BYTES} bytes")
            with archive.open(info) as handle:
                text = handle.read(MAX_METADATA_BYTES + 1).decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile) as error:
        raise InputError(f"--package {wheel.name}: cannot read the wheel ({error})") from None
    needs = []
    for line in HeaderParser().parsestr(text).get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as error:
            raise InputError(f"--package {wheel.name}: Requires-Dist {line!r}: {error}") from None
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            needs.append(requirement)
    return needs


def _meets(package: Package, requirement: Requirement) -> bool:
    try:
        version = Version(package.version)
    except InvalidVersion:
        return False
    return (canonicalize_name(package.name) == canonicalize_name(requirement.name)
            and requirement.specifier.contains(version, prereleases=True))


def _wheelhouse(folders: Iterable[Path]) -> list[tuple[str, Version, Path]]:
    """Every wheel in `folders` this interpreter can install: (name, version, path)."""
    supported = set(sys_tags())
    found = []
    for folder in folders:
        for path in sorted(folder.glob("*.whl")):
            try:
                name, version, _, tags = parse_wheel_filename(path.name)
            except InvalidWheelFilename:
                continue
            if tags & supported:
                found.append((str(name), version, path))
    return found


def close(given: Iterable[Package], wheels: dict[str, Path]) -> Closure:
    """`given` closed under the needs of their wheels (`wheels`: canonical name -> the wheel
    file given for it), with wheels for the needs taken from the folders of those wheels."""
    packages: dict[str, Package] = {str(canonicalize_name(p.name)): p for p in given}
    files = dict(wheels)
    house = _wheelhouse({path.parent for path in wheels.values()})
    unchecked = tuple(sorted(f"{p.name}=={p.version}" for key, p in packages.items()
                             if key not in files))
    missing: list[str] = []
    todo = list(files)
    while todo:
        key = todo.pop(0)
        owner = packages[key]
        for need in wheel_requirements(files[key]):
            name = str(canonicalize_name(need.name))
            if name in packages:
                if not _meets(packages[name], need):
                    missing.append(f"{owner.name}=={owner.version} needs {need}, and "
                                   f"{packages[name].name}=={packages[name].version} is locked")
                continue
            candidates = [(version, path) for n, version, path in house
                          if n == name and need.specifier.contains(version, prereleases=True)]
            if not candidates:
                missing.append(f"{owner.name}=={owner.version} needs {need}")
                continue
            version, path = max(candidates)
            packages[name] = Package(str(need.name), str(version), (sha256_file(path),))
            files[name] = path
            todo.append(name)
    return Closure(tuple(packages.values()), tuple(dict.fromkeys(missing)), unchecked)
