"""SGLang in the tests: the pinned install of its argument parser (scripts/install-sglang.sh,
beside the vLLM venv it extends) and the command `dflash-guard launch sglang` prints.

The install cache is the real one (`~/.cache/dflash-guard/sglang/<digest>`, or
`DFLASH_GUARD_CACHE_DIR` as the session started with), like vLLM's: about a minute once vLLM's
venv is there, nothing afterwards. A failed install fails the tests that need it (never a
skip). Serving SGLang needs a GPU: no test starts it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.llamacpp import engine_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-sglang.sh"
# the file of the installed wheel that declares SGLang's Prometheus metrics (read, never imported)
METRICS_SOURCE = Path("sglang", "srt", "observability", "metrics_collector.py")


def install(timeout: float = 3600.0) -> Path:
    """The SGLang venv's python (installed once with the vLLM venv it needs, then cached;
    waits for an install in progress); `EngineUnavailable` when the install fails."""
    return Path(engine_script(SCRIPT, "install", timeout=timeout))


def site_packages(python: Path) -> Path:
    """The SGLang venv's own site-packages (where the sglang wheel is unpacked)."""
    found = subprocess.run([str(python), "-I", "-c", "import sysconfig; "
                            "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                           text=True, check=True, timeout=60)
    return Path(found.stdout.strip())
