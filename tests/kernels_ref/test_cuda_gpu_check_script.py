"""scripts/gpu-check.sh refuses clearly, with exit 2, where torch sees no CUDA device."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check.sh"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_gpu_check_exits_2_without_cuda() -> None:
    result = subprocess.run(
        ["bash", str(SCRIPT)],
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no CUDA device" in result.stderr and "nothing was checked" in result.stderr
