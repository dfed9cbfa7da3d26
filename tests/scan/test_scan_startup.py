"""`dflash-guard scan` imports only what the files in front of it need (start-up time).

Each case runs the CLI in a fresh interpreter and lists the heavy libraries it imported: a folder
of safetensors and JSON needs none of them; a pickle brings modelscan, a template jinja2 and a
finding rich (for its tables).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.scan_builders import gadget_pickle, write_json, write_safetensors

HEAVY = (
    "torch",
    "modelscan",
    "sigstore",
    "huggingface_hub",
    "jinja2",
    "numpy",
    "httpx",
    "gguf",
    "rich",  # a clean report is one plain line; tables come with findings
)

_PROBE = """
import json, sys
from dflash_guard._cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
heavy = sorted(name for name in {heavy!r} if name in sys.modules)
print(json.dumps({{"exit": code, "heavy": heavy}}), file=sys.stderr)
"""


def _scan_imports(folder: Path) -> tuple[int, list[str]]:
    """(exit code, heavy libraries imported) of `dflash-guard scan FOLDER` in a fresh process."""
    probe = _PROBE.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", probe, "scan", str(folder)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    result = json.loads(done.stderr.strip().splitlines()[-1])
    return result["exit"], result["heavy"]


def test_safetensors_and_json_folder_imports_no_heavy_library(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model.safetensors")
    write_json(tmp_path / "config.json", {"architectures": ["LlamaForCausalLM"]})
    write_json(tmp_path / "generation_config.json", {"do_sample": False})
    assert _scan_imports(tmp_path) == (0, [])


def test_a_pickle_brings_modelscan_and_a_template_brings_jinja2(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(gadget_pickle("os", "system"))
    write_json(tmp_path / "tokenizer_config.json", {"chat_template": "{{ messages }}"})
    code, heavy = _scan_imports(tmp_path)
    assert code == 1 and {"modelscan", "jinja2", "rich"} <= set(heavy)
    assert "torch" not in heavy and "sigstore" not in heavy
