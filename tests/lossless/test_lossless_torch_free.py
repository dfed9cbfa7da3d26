"""The lossless modules an endpoint diff or the CLI needs load without torch (seconds saved)."""

from __future__ import annotations

import subprocess
import sys

TORCH_FREE = (
    "kernels_ref.prompts",
    "dflash_guard.lossless.defaults",
    "dflash_guard.lossless.prompts",
    "dflash_guard.lossless.options",
    "dflash_guard.lossless.result",
    "dflash_guard.lossless.endpoint",
    "dflash_guard.cli.difftest_cmd",
)


def test_lossless_defaults_prompts_and_endpoint_diff_import_without_torch():
    code = (
        "import importlib, sys\n"
        f"for name in {TORCH_FREE!r}: importlib.import_module(name)\n"
        "from kernels_ref.prompts import DEFAULT_PROMPTS\n"
        "from dflash_guard.lossless.prompts import read_prompts\n"
        "assert read_prompts(DEFAULT_PROMPTS)\n"
        "sys.exit(3 if 'torch' in sys.modules else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr or "torch was imported"


def test_the_guard_fires_when_torch_is_imported():
    """The check above can fail: a module that imports torch is caught the same way."""
    code = "import sys, kernels_ref.model\nsys.exit(3 if 'torch' in sys.modules else 0)\n"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 3
