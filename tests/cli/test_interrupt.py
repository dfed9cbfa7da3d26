"""Ctrl-C during a gate (newcomer P9): the open stages end as `interrupted`, never `done`, and
the last line says the command stopped; exit 130, nothing written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.trust import write_lock

ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_in_a_gate_is_not_done(locked_pair, tmp_path):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    record = tmp_path / "approval.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    gate = subprocess.Popen(
        [sys.executable, "-m", "dflash_guard", "gate", "--lock", str(lock), "--policy", "dev",
         "--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}",
         "-o", str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        # as a terminal starts a command: a shell running the suite in the background
        # (`make test &`) ignores SIGINT, every child inherits that, and the gate never sees it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert gate.stderr is not None
    seen = []
    for line in gate.stderr:  # the diff has started: interrupt it there
        seen.append(line)
        if line.strip() == "difftest ...":
            gate.send_signal(signal.SIGINT)
            break
    rest = gate.stderr.read()
    gate.wait(timeout=120)
    after = rest.splitlines()
    assert gate.returncode == 130, "".join(seen) + rest
    assert after[-1].startswith("interrupted: stopped by Ctrl-C"), rest
    assert not any(line.strip().startswith("difftest: done") for line in after), rest
    assert any(line.strip().startswith("difftest: interrupted") for line in after), rest
    assert not record.exists()
