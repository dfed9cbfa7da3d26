"""Ctrl-C during a gate (newcomer P9): the open stages end as `interrupted`, never `done`, and
the last line says the command stopped; exit 130, nothing written."""

from __future__ import annotations

import json
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
    # the built-in prompts 30 times over: the diff lasts long enough for the signal to land in
    # it on a loaded machine (12 prompts took 1.4 s, and a full run's Ctrl-C came after them)
    rows = [json.loads(line) for line in
            (ROOT / "kernels_ref" / "prompts" / "default.jsonl").read_text().splitlines()]
    (tmp_path / "many.jsonl").write_text("".join(
        json.dumps({**row, "id": f"{row['id']}-{copy}"}) + "\n"  # ids stay unique
        for copy in range(30) for row in rows))
    (tmp_path / "slow.yaml").write_text("extends: dev\nname: slow-diff\n"
                                        "difftest: {prompts: ./many.jsonl}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    gate = subprocess.Popen(
        [sys.executable, "-m", "dflash_guard", "gate", "--lock", str(lock), "--policy", "slow.yaml",
         "--root", f"target={locked_pair.target}", "--root", f"drafter={locked_pair.drafter}",
         "-o", str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
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
