"""The command blocks of README.md and docs/ (issue 36), and `run_block`, which runs one as the
page writes it: tests/test_doc_blocks.py inventories them, and the tests that run a block (there
and in tests/engine) call `run_block`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.support.llamacpp import SESSION_CACHE_DIR, free_port
from tests.support.release import clean_env
from tests.support.trust import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = ("", "sh", "bash", "console", "shell")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    line: int
    text: str
    marker: str | None  # the test that runs it


def blocks(page: Path) -> list[Block]:
    """The shell-like fenced blocks of `page`, each with the marker that runs it, if any."""
    text = page.read_text()
    regions = [(m.start(), m.end(), m.group(1)) for m in re.finditer(
        r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", text, flags=re.DOTALL)]
    found = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL):
        if m.group(1) not in SHELL:
            continue
        before = text[:m.start()].rstrip().rsplit("\n", 1)[-1]
        named = re.fullmatch(r"<!-- doc-test: ([\w-]+) -->", before)
        inside = next((name for start, end, name in regions if start < m.start() < end), None)
        found.append(Block(page.name, text[:m.start()].count("\n") + 1, m.group(2),
                           named.group(1) if named else inside))
    return found


ALL = [block for page in PAGES for block in blocks(page)]
RUN: dict[str, Block] = {b.marker: b for b in ALL if b.marker}


def _env() -> dict[str, str]:
    # One thread per engine, as tests/support starts them: a llama-server spinning on both cores
    # beside the other xdist worker can leave a request unanswered for a minute (LLAMA_ARG_THREADS
    # is llama.cpp's own environment spelling of -t, so the block runs as the page writes it).
    env = clean_env(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", LLAMA_ARG_THREADS="1")
    env.pop("DFLASH_GUARD_CACHE_DIR", None)  # the engines' and tokenizers' cache of the session
    for name in ("COLUMNS", "LINES"):  # the pages show output off a terminal: tables not folded
        env.pop(name, None)
    if SESSION_CACHE_DIR:
        env["DFLASH_GUARD_CACHE_DIR"] = SESSION_CACHE_DIR
    return env


def run_block(name: str, cwd: Path, *, ports: tuple[str, ...] | Mapping[str, int] = (),
              strict: bool = True, timeout: float = 900, exit_code: int = 0) -> str:
    """Run the block `name` with bash in `cwd` (its own process group, killed at the end), the
    page's `ports` replaced by free ones (or, given a mapping, by the ports of servers already
    running); its output, after asserting it exited `exit_code` (the page's documented
    outcome)."""
    script = RUN[name].text
    mapping = ports if isinstance(ports, Mapping) else {port: free_port() for port in ports}
    for port in mapping:
        assert port in script
    # one pass: a free port for 8080 (48081) must not be rewritten again as if it were 8081
    if mapping:
        script = re.sub("|".join(map(re.escape, mapping)), lambda m: str(mapping[m.group()]),
                        script)
    flags = "-euo" if strict else "-uo"
    process = subprocess.Popen(["bash", flags, "pipefail", "-c", script], cwd=cwd,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=_env(), start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)  # servers the block left running
    assert process.returncode == exit_code, output
    return output


def clone_root(folder: Path) -> Path:
    """`folder` set up as a clone's root for a block that calls scripts/ and lockfiles/."""
    for name in ("scripts", "lockfiles"):
        (folder / name).symlink_to(REPO / name)
    return folder


