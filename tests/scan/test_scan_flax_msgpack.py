"""`flax_model.msgpack` parsed whole by msgpack: a checkpoint written the way flax writes one is
data; an extension type, dtype or payload flax does not write, trailing bytes, a second object,
a truncation, nesting or a length past the caps make it a possible pickle (high).

flax cannot be installed here, so its writer is reproduced from flax/serialization.py
(tests/support/flax_msgpack.py) and checked against its reader (`_msgpack_ext_unpack`,
`_ndarray_from_bytes`: `unpackb(raw=True)` then `numpy.frombuffer`), reproduced the same way.
"""

from __future__ import annotations

from pathlib import Path

import msgpack
import numpy as np
import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.scan.weights.flax_msgpack import msgpack_problem
from dflash_guard.severity import Severity
from tests.support.flax_msgpack import flax_serialize


# -- flax's reader, as flax/serialization.py has it (the writer: tests/support/flax_msgpack.py)
def _ext_unpack(code: int, data: bytes) -> object:
    if code in (1, 3):
        shape, dtype, buffer = msgpack.unpackb(data, raw=True)
        array = np.frombuffer(buffer, dtype=np.dtype(dtype.decode())).reshape(shape)
        return array if code == 1 else array[()]
    if code == 2:
        real, imag = msgpack.unpackb(data)
        return complex(real, imag)
    return msgpack.ExtType(code, data)


def flax_restore(data: bytes) -> dict:
    return msgpack.unpackb(data, ext_hook=_ext_unpack, raw=False)


rng = np.random.default_rng(0)
# The shape of a small BERT's flax checkpoint (`params` of FlaxBertModel), numeric leaves only.
STATE = {"params": {
    "embeddings": {"word_embeddings": {"embedding": rng.standard_normal((32, 8)).astype("float32")},
                   "LayerNorm": {"scale": np.ones(8, "float16"), "bias": np.zeros(8, "float16")}},
    "encoder": {"layer": {"0": {"attention": {"self": {
        "query": {"kernel": rng.standard_normal((8, 8)).astype("float32"),
                  "bias": np.zeros(8, "float32")}}}}}},
    "pooler": {"dense": {"kernel": np.arange(64, dtype="int32").reshape(8, 8),
                         "mask": np.array([True, False])}},
    "step": np.int64(3), "scale": 0.5, "phase": 1 + 2j, "name": "bert", "empty": None}}


def _write(folder: Path, data: bytes) -> Path:
    path = folder / "flax_model.msgpack"
    path.write_bytes(data)
    return path


def test_a_checkpoint_written_as_flax_writes_it_is_data(tmp_path: Path) -> None:
    data = flax_serialize(STATE)
    restored = flax_restore(data)  # flax's reader gets the same tree back
    query = restored["params"]["encoder"]["layer"]["0"]["attention"]["self"]["query"]
    assert np.array_equal(query["kernel"], STATE["params"]["encoder"]["layer"]["0"]["attention"][
        "self"]["query"]["kernel"])
    assert restored["params"]["step"] == 3 and restored["params"]["phase"] == 1 + 2j
    _write(tmp_path, data)
    report = scan_paths([tmp_path])
    assert report.findings == [] and report.pickle_files == []


def _array_ext(shape: object, dtype: bytes, buffer: bytes, code: int = 1) -> msgpack.ExtType:
    return msgpack.ExtType(code, msgpack.packb((shape, dtype, buffer), use_bin_type=True))


BAD = {
    "unknown extension code": msgpack.packb({"w": msgpack.ExtType(5, b"x")}),
    "object dtype": msgpack.packb({"w": _array_ext([1], b"object", b"\x00" * 8)}),
    "void dtype": msgpack.packb({"w": _array_ext([1], b"void64", b"\x00" * 8)}),
    "string dtype": msgpack.packb({"w": _array_ext([1], b"str32", b"\x00" * 4)}),
    "short buffer": msgpack.packb({"w": _array_ext([4, 4], b"float32", b"\x00" * 60)}),
    "negative dimension": msgpack.packb({"w": _array_ext([-1], b"float32", b"")}),
    "scalar with a shape": msgpack.packb({"w": _array_ext([2], b"int32", b"\x00" * 8, code=3)}),
    "payload not msgpack": msgpack.packb({"w": msgpack.ExtType(1, b"\xc1")}),
    "payload with trailing bytes": msgpack.packb({"w": msgpack.ExtType(
        1, msgpack.packb(([1], b"int8", b"\x00"), use_bin_type=True) + b"\x00")}),
    "payload a map": msgpack.packb({"w": msgpack.ExtType(1, msgpack.packb({"a": 1}))}),
    "complex not a pair": msgpack.packb({"w": msgpack.ExtType(2, msgpack.packb((1.0,)))}),
    "trailing bytes": flax_serialize(STATE) + b"\x00",
    "two objects": flax_serialize(STATE) + flax_serialize(STATE),
    "truncated": flax_serialize(STATE)[:-5],
    "empty file": b"",
    "nested past the parser's stack": b"\x91" * 5000 + b"\xc0",
    "an array length past the cap": b"\xdd\xff\xff\xff\xff",
    "a map length past the cap": b"\xdf\x7f\xff\xff\xff",
    "a string not UTF-8": msgpack.packb({"w": 1})[:-2] + b"\xa1\xff\x01",
    "an integer map key": msgpack.packb({1: 2}),
    "a pickle under the name": b"\x80\x04\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94"
                               b"\x8c\x06system\x94\x93\x94.",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_anything_flax_does_not_write_is_a_possible_pickle(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path, BAD[case])
    assert msgpack_problem(path) is not None
    report = scan_paths([tmp_path])
    assert report.pickle_files == ["flax_model.msgpack"]
    assert max(f.severity for f in report.findings) >= Severity.high


def test_an_object_past_the_size_cap_is_not_read(tmp_path: Path, monkeypatch) -> None:
    from dflash_guard.scan.weights import flax_msgpack

    monkeypatch.setattr(flax_msgpack, "MAX_OBJECT", 1024)
    path = _write(tmp_path, flax_serialize({"w": np.zeros(4096, "uint8")}))
    assert "over 1024 bytes" in (msgpack_problem(path) or "")
