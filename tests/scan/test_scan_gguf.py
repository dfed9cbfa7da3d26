"""The GGUF detector: reader errors become findings; the metadata chat template is checked."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_guard.scan.weights.gguf import scan_gguf_file
from dflash_guard.severity import Severity
from kernels_ref import gguf_reader


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
    """Clean once its template is reviewed; before, only the (low) note that it is not."""
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    path = write_gguf(tmp_path / "m.gguf", template)
    found = scan_gguf_file(path, "m.gguf")
    assert [(f.rule_id, f.member) for f in found] == [
        ("DG-TPL-UNREVIEWED", "tokenizer.chat_template")]
    digest = hashlib.sha256(template.encode()).hexdigest()
    assert scan_gguf_file(path, "m.gguf", frozenset({digest})) == []


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


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _kv_gguf(pairs: list[bytes], tensors: int = 0) -> bytes:
    """A GGUF v3 header with the given encoded key/value pairs and no tensor data."""
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, len(pairs)) + b"".join(pairs)


def _arch() -> bytes:
    return _string(b"general.architecture") + struct.pack("<I", 8) + _string(b"llama")


def test_array_count_beyond_the_file_is_malformed_not_a_hang(tmp_path: Path) -> None:
    """A 1 KB file claiming 2^62 uint8 items: the gguf reader would loop and allocate for ever."""
    huge = _string(b"x.items") + struct.pack("<IIQ", 9, 0, 1 << 62) + b"\0" * 900
    path = tmp_path / "huge.gguf"
    path.write_bytes(_kv_gguf([_arch(), huge]))
    findings = scan_gguf_file(path, "huge.gguf")
    assert [f.rule_id for f in findings] == ["DG-GGUF-MALFORMED"]
    assert "2^62" not in findings[0].message and str(1 << 62) in findings[0].message


@pytest.mark.parametrize(
    "pair",
    [
        _string(b"x") + struct.pack("<IIQ", 9, 8, 1 << 40),  # strings: 8 bytes each at least
        struct.pack("<Q", 1 << 60) + b"key",  # a key length beyond the file
        _string(b"x") + struct.pack("<I", 77),  # no such value type
    ],
)
def test_other_header_counts_beyond_the_file(tmp_path: Path, pair: bytes) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(_kv_gguf([_arch(), pair]))
    assert [f.rule_id for f in scan_gguf_file(path, "bad.gguf")] == ["DG-GGUF-MALFORMED"]


def test_too_many_array_items_is_a_limit_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf_reader, "MAX_ARRAY_ITEMS", 10)
    items = _string(b"x.items") + struct.pack("<IIQ", 9, 8, 20) + _string(b"t") * 20
    path = tmp_path / "many.gguf"
    path.write_bytes(_kv_gguf([_arch(), items]))
    assert [f.rule_id for f in scan_gguf_file(path, "many.gguf")] == ["DG-UNSCANNABLE"]


def test_a_real_vocabulary_passes_the_pre_pass(tmp_path: Path) -> None:
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_token_list([f"tok{i}" for i in range(2000)])
    writer.add_token_scores([0.0] * 2000)
    writer.add_tensor("w", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert scan_gguf_file(path, "vocab.gguf") == []


def test_template_key_with_a_trailing_nul_is_checked(tmp_path: Path) -> None:
    """llama.cpp compares keys as C strings: `tokenizer.chat_template\\0` is the template."""
    payload = b"{{ cycler.__init__.__globals__.os.popen('id').read() }}"
    key = _string(b"tokenizer.chat_template\0") + struct.pack("<I", 8) + _string(payload)
    path = tmp_path / "nul.gguf"
    path.write_bytes(_kv_gguf([_arch(), key]))
    findings = scan_gguf_file(path, "nul.gguf")
    assert any(f.severity >= Severity.high and f.member for f in findings)
