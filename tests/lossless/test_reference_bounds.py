"""N25: a config.json whose sizes would allocate gigabytes ends in one readable error (exit 2).

Run as a subprocess under an address-space limit, so a regression fails on the limit instead
of allocating the memory."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fixtures import ModelPair

LIMIT = 3 << 30  # bytes of address space: torch and the tiny pair fit, 12.8 GB does not


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


@pytest.mark.parametrize(
    ("vocab", "message"),
    [
        (50_000_000, "config field 'vocab_size' is 50000000, above kernels_ref's limit"),
        (4_000_000, "'model.embed_tokens.weight' has shape (264, 64), the config implies"),
    ],
)
def test_difftest_on_an_oversized_vocab_is_an_input_error(
    tmp_path: Path, builtin_pair: ModelPair, vocab: int, message: str
) -> None:
    pair = {}
    for role, source in builtin_pair.roots.items():
        folder = pair[role] = tmp_path / role
        shutil.copytree(source, folder)
        config = json.loads((folder / "config.json").read_text())
        config["vocab_size"] = vocab  # both agree, so the scan finds them consistent
        (folder / "config.json").write_text(json.dumps(config))
    result = subprocess.run(
        [sys.executable, "-m", "dflash_guard", "difftest", "local", "--target", str(pair["target"]),
         "--drafter", str(pair["drafter"]), "--max-new-tokens", "4"],
        capture_output=True, text=True, check=False, timeout=300, preexec_fn=_limit_memory,
        env={**os.environ, "OMP_NUM_THREADS": "1", "DFLASH_GUARD_DEBUG": ""},
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "internal error" not in result.stderr
