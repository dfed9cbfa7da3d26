"""The README is a door and docs/ the house: the README stays short, its walk runs as written,
no link rots (README, CONTRIBUTING and CHANGELOG checked here, docs/ by `mkdocs build --strict`),
and the reference-server example of docs/diff-testing.md waits for its servers."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.llamacpp import free_port
from tests.support.release import clean_env
from tests.support.trust import REPO

DOCS = REPO / "docs"
README = REPO / "README.md"
TOP_LEVEL = [README, REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def shell_blocks(path: Path, marker: str) -> str:
    """The ```sh blocks between `<!-- MARKER:start -->` and `<!-- MARKER:end -->`, joined."""
    text = path.read_text()
    section = text.split(f"<!-- {marker}:start -->\n", 1)[1].split(f"<!-- {marker}:end -->", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)
    assert blocks, f"no ```sh block between the {marker} markers of {path.name}"
    return "".join(blocks)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def shell_env() -> dict[str, str]:
    """The test's environment with this checkout importable and the venv's scripts on PATH."""
    return clean_env(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")


def test_readme_is_a_short_door_into_docs() -> None:
    """Short, and it opens onto the docs (mkdocs' nav check keeps every page reachable there)."""
    readme = README.read_text()
    lines = readme.splitlines()
    assert len(lines) < 350, f"README.md has {len(lines)} lines; move reference text to docs/"
    assert "docs/index.md" in LINK.findall(readme)


@pytest.mark.parametrize("document", TOP_LEVEL, ids=lambda p: p.name)
def test_relative_links_resolve(document: Path) -> None:
    broken = []
    for target in LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL: not checked (no network in tests)
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == [], f"{document.name}: {broken}"


def test_a_link_to_a_missing_anchor_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n## Real heading\n")
    assert "real-heading" in anchors(page)
    assert "no-such-heading" not in anchors(page)


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
         "-d", str(site)],
        capture_output=True, text=True, timeout=300, env=shell_env(),
    )


def test_mkdocs_builds_the_site_strictly(tmp_path: Path) -> None:
    result = mkdocs_build(REPO / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    rules = (tmp_path / "site" / "scanning" / "index.html").read_text()
    assert "<td>DG-PICKLE-DANGEROUS-GLOBAL</td>" in rules  # the rule table rendered as a table


def test_mkdocs_strict_fails_on_a_broken_link_or_anchor(tmp_path: Path) -> None:
    """The build in `make test` is a real check: the same config refuses a rotten link or anchor,
    and a page left out of the nav."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    limits = tmp_path / "docs" / "limits.md"
    original = limits.read_text()
    for link, named in [("gone.md", "gone.md"), ("scanning.md#no-such-section", "no-such-section")]:
        limits.write_text(original + f"\nSee [this]({link}).\n")
        result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
        assert result.returncode != 0
        assert named in result.stdout + result.stderr
    limits.write_text(original)
    (tmp_path / "docs" / "orphan.md").write_text("# A page the nav does not list\n")
    result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "orphan.md" in result.stdout + result.stderr


@pytest.mark.slow
def test_readme_walk_runs_verbatim(tmp_path: Path) -> None:
    """The five-minute walk, exactly as the README shows it, in an empty folder."""
    walk = shell_blocks(README, "walk")
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", walk], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600, env=shell_env())
    assert result.returncode == 0, result.stdout + result.stderr
    readme = README.read_text()
    for quoted in ("DG-RC-UNREVIEWED", "OK: 8 files match the lockfile",
                   "APPROVED: record approval.json", "MISMATCH: 1 problem(s)", "refused: exit 1"):
        assert quoted in readme  # what the README says the walk prints...
        assert quoted in result.stdout, quoted  # ...is what it prints
    assert (tmp_path / "approval.json").is_file()


@pytest.mark.slow
def test_reference_server_example_waits_for_its_servers(tmp_path: Path) -> None:
    """docs/diff-testing.md's local endpoint example, on free ports instead of 8000 and 8001."""
    block = shell_blocks(DOCS / "diff-testing.md", "reference-servers")
    assert "8000" in block and "8001" in block
    block = block.replace("8000", str(free_port())).replace("8001", str(free_port()))
    process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=shell_env(), start_new_session=True)
    try:
        output, _ = process.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)  # the servers, if the block stopped early
    assert process.returncode == 0, output
    assert "verdict: identical" in output


@pytest.mark.parametrize("package", ["scan", "templates"])
def test_the_architecture_row_names_every_module_of_its_package(package: str) -> None:
    """docs/architecture.md's row for a package names each of its modules and rooms (by the
    name it has in the tree), so the map cannot fall behind a move."""
    root = REPO / "dflash_guard" / package
    row = next(line for line in (DOCS / "architecture.md").read_text().splitlines()
               if line.startswith(f"| `dflash_guard/{package}/` |"))
    names = {path.stem for path in root.rglob("*.py") if path.stem != "__init__"}
    names |= {f"{path.name}/" for path in root.iterdir() if (path / "__init__.py").is_file()}
    names |= {path.name for path in root.glob("*.json")}
    assert sorted(name for name in names if f"`{name}`" not in row) == []
