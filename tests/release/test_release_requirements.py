"""requirements/release.txt is what `export requirements` writes from lockfiles/release.lock."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from dflash_guard.pins.lockfile import load_lockfile
from tests.support.release import RELEASE_LOCK, RELEASE_REQUIREMENTS, REPO


def test_committed_requirements_are_exported_from_the_committed_lock(cli, tmp_path):
    out = tmp_path / "release.txt"
    result = cli("export", "requirements", "--lock", RELEASE_LOCK, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert out.read_text() == RELEASE_REQUIREMENTS.read_text()


def test_every_runtime_dependency_is_pinned_with_a_hash():
    """Each dependency in pyproject is locked at a version its range accepts, with a hash."""
    lock = load_lockfile(RELEASE_LOCK)
    locked = {canonicalize_name(p.name): p for p in lock.packages}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        requirement = Requirement(spec)
        package = locked.get(canonicalize_name(requirement.name))
        assert package is not None, f"{requirement.name} is not in {RELEASE_LOCK.name}"
        assert requirement.specifier.contains(Version(package.version), prereleases=True), spec
        assert package.sha256, requirement.name


def test_release_in_names_exactly_the_locked_packages():
    """release.in (what `make requirements` downloads) and the lock agree name for name."""
    text = (REPO / "requirements" / "release.in").read_text()
    wanted = {(canonicalize_name(n), v) for n, v in re.findall(r"^([\w.-]+)==(\S+)$", text, re.M)}
    lock = load_lockfile(RELEASE_LOCK)
    assert wanted == {(canonicalize_name(p.name), p.version) for p in lock.packages}


def test_the_release_lock_is_refused_when_a_hash_is_edited(cli, tmp_path):
    """The export reads the lock strictly: a hand-edited hash breaks its digest (exit 2)."""
    text = RELEASE_LOCK.read_text()
    first = re.search(r"^  - ([0-9a-f]{64})$", text, re.M)
    assert first is not None
    tampered = tmp_path / "release.lock"
    tampered.write_text(text.replace(first[1], "ab" * 32, 1))
    result = cli("export", "requirements", "--lock", tampered)
    assert result.exit_code == 2
    assert "digest" in result.stderr
