"""Tables off a terminal (a CI log, a pipe): no row wraps at 80 columns, so the sha256 a user pastes
into a policy and a file name stay whole on one line, and `where` names the file (or flag) of
each finding in one table, with no heading line per file."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys

from tests.support import vllm
from tests.support.release import clean_env
from tests.support.trust import REPO, write_lock

LONG_NAME = "modeling_" + "very_long_name_" * 6 + "dflash.py"


def _table_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("│").split("│")]
            for line in text.splitlines() if line.startswith("│")]


def test_scan_in_a_pipe_keeps_digests_and_names_whole(tmp_path):
    folder = tmp_path / "drafter"
    folder.mkdir()
    source = b"import socket\n\n\ndef f():\n    socket.create_connection(('x', 1))\n"
    (folder / LONG_NAME).write_bytes(source)
    env = clean_env(PYTHONPATH=str(REPO))
    env.pop("COLUMNS", None)
    result = subprocess.run([sys.executable, "-m", "dflash_guard", "scan", str(folder), "-q"],
                            capture_output=True, text=True, env=env, check=False, timeout=120)
    assert result.returncode == 1, result.stderr
    rows = _table_rows(result.stdout)
    digest = hashlib.sha256(source).hexdigest()
    assert [row for row in rows if row[1] == "DG-RC-UNREVIEWED" and row[2] == LONG_NAME
            and digest in row[3]]
    # the network call is placed by file and line, and no row is a wrapped continuation
    assert [row for row in rows if row[1] == "DG-RC-NETWORK" and row[2] == f"{LONG_NAME}:5"]
    assert all(row[0] and row[1] and row[2] for row in rows)
    assert LONG_NAME not in result.stdout.split("┏")[0]  # no heading line above the table


def test_launch_check_puts_every_flag_in_one_table(cli, tmp_path, locked_pair, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = cli("launch", "--check", "vllm", "--lock", lock, "--program", vllm.install(), "--",
                 "vllm", "serve",
                 "Qwen/Qwen3-8B", "--trust-remote-code", "--host", "0.0.0.0")
    assert result.exit_code == 1
    assert result.stdout.count("┏") == 1  # one table for every finding
    places = {row[2] for row in _table_rows(result.stdout)}
    assert {"--host", "--model"} <= places
    assert not re.search(r"^--host$", result.stdout, flags=re.MULTILINE)
