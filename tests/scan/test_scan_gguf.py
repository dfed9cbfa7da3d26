"""The GGUF detector: reader errors become findings; the metadata chat template is checked."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from dflash_guard.scan import Severity
from dflash_guard.scan.gguf_check import scan_gguf_file


def write_gguf(path: Path, template: str | None) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    if template is not None:
        writer.add_chat_template(template)
    writer.add_tensor("w", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_benign_gguf_is_clean(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert scan_gguf_file(path, "m.gguf") == []


def test_cve_2024_34359_template_in_metadata(tmp_path: Path) -> None:
    payload = "{{ self.__init__.__globals__.__builtins__.__import__('os').popen('id').read() }}"
    path = write_gguf(tmp_path / "evil.gguf", payload)
    findings = scan_gguf_file(path, "evil.gguf")
    worst = [f for f in findings if f.severity is Severity.critical]
    assert worst and worst[0].member == "tokenizer.chat_template"


def test_truncated_gguf_is_malformed(tmp_path: Path) -> None:
    good = write_gguf(tmp_path / "m.gguf", None)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:40])
    findings = scan_gguf_file(cut, "cut.gguf")
    assert findings and all(f.severity >= Severity.high for f in findings)


def test_tensor_past_the_end_is_flagged(tmp_path: Path) -> None:
    good = write_gguf(tmp_path / "m.gguf", None)
    cut = tmp_path / "short.gguf"
    cut.write_bytes(good.read_bytes()[:-40])
    findings = scan_gguf_file(cut, "short.gguf")
    assert findings and max(f.severity for f in findings) >= Severity.high
