"""Safetensors metadata payloads in common encodings, wherever they sit in a value, at a
bounded cost; benign twins are metadata real checkpoints carry."""

from __future__ import annotations

import base64
import bz2
import gzip
import json
import lzma
import zlib
from pathlib import Path

import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.scan.pickle.payloads import MAX_PARSED, serialized_payload
from dflash_guard.severity import Severity
from tests.support.scan_builders import gadget_pickle, raw_safetensors

PICKLE = gadget_pickle("os", "system", "id", protocol=2)
B64 = base64.b64encode(PICKLE).decode()

MALICIOUS = {
    "base64 inside prose": f"trained with care; state={B64}; see README",
    "base64 in a JSON value": json.dumps({"config": {"blob": B64, "lr": 0.1}}),
    "urlsafe base64": base64.urlsafe_b64encode(b"\xfb\xff\xfe" + PICKLE).decode(),
    "hex": "cache:" + PICKLE.hex(),
    "zlib in base64": "z=" + base64.b64encode(zlib.compress(PICKLE)).decode(),
    "gzip in base64": base64.b64encode(gzip.compress(PICKLE)).decode() + " (gz)",
    "bz2 in hex": bz2.compress(PICKLE).hex(),
    "xz in base64": base64.b64encode(lzma.compress(PICKLE)).decode(),
    "raw zlib bytes": "x" + zlib.compress(PICKLE).decode("latin-1"),
    "yaml python tag": "!!python/object/apply:os.system ['id']",
    "yaml percent-escaped tag": "!<tag:yaml.org,2002:python%2Fobject/apply:os.system> ['id']",
    "yaml tag directive": "%TAG !p! tag:yaml.org,2002:\n---\n!p!python/object/apply:os.system",
    "yaml in base64": base64.b64encode(b"!!python/name:os.system ''").decode(),
}
BENIGN = {
    "format": "pt",
    "a sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "architectures": json.dumps({"architectures": ["Qwen3ForCausalLM", "DFlashDraftModel"]}),
    "a model card line": "Qwen3-8B-DFlash-b16: block diffusion drafter, block_size 16",
    "peft": json.dumps({"base_model_name_or_path": "Qwen/Qwen3-8B", "r": 16,
                        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}),
    "mlx": json.dumps({"format": "mlx", "quantization": {"group_size": 64, "bits": 4}}),
}


@pytest.mark.parametrize("name", MALICIOUS)
def test_payload_found(name: str) -> None:
    assert serialized_payload(MALICIOUS[name]), name


@pytest.mark.parametrize("name", BENIGN)
def test_benign_metadata_is_quiet(name: str) -> None:
    assert serialized_payload(BENIGN[name]) is None


def test_a_decompression_bomb_stops_at_the_cap() -> None:
    bomb = base64.b64encode(zlib.compress(b"\x00" * (64 * MAX_PARSED), 9)).decode()
    assert serialized_payload(bomb) is None  # decoded up to the cap, found nothing, returned


def test_metadata_payload_fails_the_scan(tmp_path: Path) -> None:
    header = json.dumps({"__metadata__": {"notes": MALICIOUS["zlib in base64"]},
                         "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})
    header += " " * (-len(header) % 8)
    (tmp_path / "model.safetensors").write_bytes(raw_safetensors(header, b"\x00" * 4))
    loud = [f for f in scan_paths([tmp_path]).findings if f.severity >= Severity.high]
    assert loud and "zlib" in loud[0].message, loud
