"""Random and mutated safetensors, pickle, torch zip, compressed joblib and GGUF bytes never
crash or hang the scanner."""

from __future__ import annotations

import tempfile
import zlib
from pathlib import Path

import gguf
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_guard.scan import ScanReport, scan_paths
from tests.support.scan_builders import gadget_pickle, raw_safetensors

FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
SAFETENSORS_SEED = raw_safetensors(
    '{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"a":"b"}}',
    b"\x01" * 16,
)
PICKLE_SEED = gadget_pickle("collections", "OrderedDict", protocol=4)


def _gguf_seed() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.gguf"
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_chat_template("{{ messages[0]['content'] }}")
        writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


GGUF_SEED = _gguf_seed()


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    """`seed` with a few bytes overwritten, a cut, or an insertion; or plain random bytes."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=256))
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert"]))
        position = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[position] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[position:]
        else:
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def _scan_bytes(name: str, data: bytes) -> ScanReport:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        return scan_paths([Path(folder)])


@FUZZ
@given(mutated(SAFETENSORS_SEED))
def test_safetensors_bytes(data: bytes) -> None:
    report = _scan_bytes("model.safetensors", data)
    assert all(f.file == "model.safetensors" for f in report.findings)


def test_seeds_are_clean() -> None:
    """The mutations start from valid files, so what the fuzzers find comes from the mutation."""
    assert _scan_bytes("model.safetensors", SAFETENSORS_SEED).findings == []
    # the seed's own template is not a published one: only that (low) note
    assert [f.rule_id for f in _scan_bytes("model.gguf", GGUF_SEED).findings] == [
        "DG-TPL-UNREVIEWED"]
    assert _scan_bytes("model.pkl", PICKLE_SEED).max_severity.name == "low"
    assert _scan_bytes("model.pt", TORCH_ZIP_SEED).max_severity.name == "low"
    assert _scan_bytes("model.joblib", JOBLIB_SEED).max_severity.name == "low"


@FUZZ
@given(mutated(PICKLE_SEED))
def test_pickle_bytes(data: bytes) -> None:
    report = _scan_bytes("model.pkl", data)
    assert all(f.file == "model.pkl" for f in report.findings)


@FUZZ
@given(mutated(GGUF_SEED))
def test_gguf_bytes(data: bytes) -> None:
    report = _scan_bytes("model.gguf", data)
    assert all(f.file == "model.gguf" for f in report.findings)


def _torch_zip_seed() -> bytes:
    import io

    import torch

    out = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, out)
    return out.getvalue()


TORCH_ZIP_SEED = _torch_zip_seed()
JOBLIB_SEED = zlib.compress(PICKLE_SEED)


@FUZZ
@given(mutated(TORCH_ZIP_SEED))
def test_torch_zip_bytes(data: bytes) -> None:
    report = _scan_bytes("model.pt", data)
    assert all(f.file == "model.pt" for f in report.findings)


@FUZZ
@given(mutated(JOBLIB_SEED))
def test_compressed_joblib_bytes(data: bytes) -> None:
    report = _scan_bytes("model.joblib", data)
    assert all(f.file == "model.joblib" for f in report.findings)
