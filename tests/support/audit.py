"""Helpers for the audit tests (imported by name; never `from conftest import`)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dflash_guard.pins.lockfile import (
    Artifact,
    Engine,
    LockedFile,
    Lockfile,
    Package,
    write_lockfile,
)
from tests.support import trust

ENGINE_URL = "https://github.com/example-org/engine"
DRAFTER_REPO = "example-org/drafter"
TARGET_REPO = "example-org/target"
DRAFTER_COMMIT = "d" * 40
TARGET_COMMIT = "e" * 40
NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` with a fixed identity; return stdout."""
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
               "-c", "commit.gpgsign=false", "-C", str(repo), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


@dataclasses.dataclass(frozen=True)
class History:
    """A real git repository: main is `root - intro - inside - fix - after`, and `side` is a
    branch off `root` that never saw `intro`."""

    path: Path
    root: str
    intro: str
    inside: str
    fix: str
    after: str
    side: str


def make_history(path: Path) -> History:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    commits = {}
    for name in ("root", "intro", "inside", "fix", "after"):
        git(path, "commit", "-q", "--allow-empty", "-m", name)
        commits[name] = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "-b", "side", commits["root"])
    git(path, "commit", "-q", "--allow-empty", "-m", "side")
    commits["side"] = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "main")
    return History(path, **commits)


def make_key_pair(folder: Path) -> tuple[Path, Path]:
    """A fresh ECDSA P-256 key pair for signing feeds: (private, public) PEM files."""
    return trust.make_key_pair(folder, "feed-key")


def _file(name: str) -> LockedFile:
    return LockedFile(name, 1, "0" * 64)


def write_lock(path: Path, *, engine_commit: str, drafter_commit: str = DRAFTER_COMMIT,
               packages: tuple[tuple[str, str], ...] = (("vllm", "0.9.0"),)) -> Path:
    """A valid lockfile with one engine, a Hub target and drafter, and packages."""
    lock = Lockfile(
        artifacts=(
            Artifact("target", "hub", TARGET_REPO, TARGET_COMMIT, TARGET_COMMIT,
                     (_file("config.json"),)),
            Artifact("drafter", "hub", DRAFTER_REPO, drafter_commit, drafter_commit,
                     (_file("config.json"),)),
        ),
        engines=(Engine("engine", ENGINE_URL + ".git", engine_commit, "v1.0"),),
        packages=tuple(Package(name, version, ("1" * 64,)) for name, version in packages),
    )
    write_lockfile(lock, path)
    return path


def osv(advisory_id: str, affected: list[dict[str, Any]], *, severity: str | None = "HIGH",
        modified: dt.datetime = NOW, **extra: Any) -> dict[str, Any]:
    """A minimal OSV record."""
    record: dict[str, Any] = {
        "id": advisory_id,
        "modified": modified.isoformat().replace("+00:00", "Z"),
        "summary": f"test advisory {advisory_id}",
        "affected": affected,
        **extra,
    }
    if severity:
        record["database_specific"] = {"severity": severity}
    return record


def git_range(repo: str, **events: str | list[str]) -> dict[str, Any]:
    """A `GIT` range with events in the order given (`fixed=[a, b]` for several)."""
    out = []
    for kind, value in events.items():
        out += [{kind: v} for v in (value if isinstance(value, list) else [value])]
    return {"type": "GIT", "repo": repo, "events": out}


def write_feed(path: Path, *records: dict[str, Any]) -> Path:
    path.write_text(json.dumps(list(records) if len(records) != 1 else records[0], indent=1))
    return path


@contextlib.contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """Serve `folder` over plain HTTP on 127.0.0.1; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass
