"""ONNX models parsed whole by the `onnx` package and its checker, each verdict held against
`onnx.load` (with its external data) and an onnxruntime `InferenceSession` on the same folder.

Benign: the 143 models of onnx's own backend test data (tests/vectors/onnx), a module exported by
torch's ONNX exporter, the same saved with its weights as external data the way `optimum` and
`onnx.save_model(save_as_external_data=True)` write large models (`model.onnx` +
`model.onnx_data`), and a node in a custom domain (onnxruntime's `com.microsoft`). Bad: whatever
`onnx.load` refuses (traversal, absolute, symlinked or hard-linked data, offsets past the end,
an invalid graph), and what both load but a pickle or unscanned bytes ride in (fields
onnx.proto does not define, a NUL in a location, data outside the scanned set, a pickle as
external data or named like one). The two loaders disagree on links: onnx refuses every
symlinked or hard-linked data file, onnxruntime follows links that stay in the model's folder,
so an HF-cache snapshot (all symlinks into blobs/) loads in onnxruntime only; the scan accepts
it (the walk keeps links inside the repo folder) and refuses hard links.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from tests.support.trust import REPO

VECTORS = REPO / "tests" / "vectors" / "onnx" / "data"


def _flagged(report) -> set[str]:
    return {f.file for f in report.findings if f.severity >= Severity.medium}


def _loads(path: Path) -> bool:
    """Whether onnx itself loads the model with its external data."""
    try:
        onnx.load(str(path), load_external_data=True)
    except Exception:  # noqa: BLE001 - onnx raises many types; any is a refusal
        return False
    return True


def _runs(path: Path) -> bool:
    """Whether onnxruntime makes a session of it (loads the graph and every initializer)."""
    onnxruntime.set_default_logger_severity(4)
    try:
        onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - a refusal, whatever its type
        return False
    return True


def _graph_model() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _external(folder: Path, name: str = "model.onnx_data") -> Path:
    """`model.onnx` with its weight in `name`, written by onnx's own writer."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save_model(_graph_model(), str(folder / "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=name, size_threshold=0)
    return folder / "model.onnx"


def _relocate(model_path: Path, **entries: str) -> None:
    """Rewrite the weight's external_data entries (location, offset, length)."""
    model = onnx.load(str(model_path), load_external_data=False)
    tensor = model.graph.initializer[0]
    values = {e.key: e.value for e in tensor.external_data} | entries
    del tensor.external_data[:]
    for key, value in values.items():
        tensor.external_data.add(key=key, value=value)
    model_path.write_bytes(model.SerializeToString())


def test_onnx_own_test_models_are_data():
    models = sorted(VECTORS.rglob("*.onnx"))
    assert len(models) == 143
    assert all(_loads(path) for path in models)
    report = scan_paths([VECTORS])
    assert report.files_scanned == 143 and report.findings == [] and report.pickle_files == []


def test_a_torch_export_and_its_external_data_are_data(tmp_path):
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
    exported = tmp_path / "export" / "model.onnx"
    exported.parent.mkdir()
    torch.onnx.export(module, (torch.randn(1, 16),), str(exported), dynamo=False)
    split = tmp_path / "split" / "onnx"
    split.mkdir(parents=True)
    onnx.save_model(onnx.load(str(exported)), str(split / "model.onnx"),
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx_data", size_threshold=0)
    assert (split / "model.onnx_data").stat().st_size > 2000
    assert _loads(split / "model.onnx") and _runs(split / "model.onnx")
    for folder in (exported.parent, split.parent):
        report = scan_paths([folder])
        assert report.findings == [] and report.pickle_files == [], folder


def test_a_custom_domain_node_is_data(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    onnx.save_model(model, str(tmp_path / "model.onnx"))
    assert _loads(tmp_path / "model.onnx") and _runs(tmp_path / "model.onnx")
    assert scan_paths([tmp_path]).findings == []


class _System:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


PAYLOAD = pickle.dumps(_System(), protocol=2)  # written, never loaded


def _case(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    model = _external(folder)
    if name == "traversal":
        (tmp_path / "secret").write_bytes(b"\0" * 256)
        _relocate(model, location="../secret")
    elif name == "absolute":
        _relocate(model, location=str(folder / "model.onnx_data"))
    elif name == "symlink":
        (tmp_path / "outside").write_bytes((folder / "model.onnx_data").read_bytes())
        (folder / "model.onnx_data").unlink()
        (folder / "model.onnx_data").symlink_to(tmp_path / "outside")
    elif name == "hardlink":
        os.link(folder / "model.onnx_data", tmp_path / "second-name")
    elif name == "past-the-end":
        _relocate(model, offset="1024")
    elif name == "too-long":
        _relocate(model, offset="0", length=str(10**12))
    elif name == "negative":
        _relocate(model, offset="-8")
    elif name == "missing":
        _relocate(model, location="weights.bin.gone")
    elif name == "invalid-graph":
        broken = _graph_model()
        broken.graph.node[0].input[0] = "undefined"
        model.write_bytes(broken.SerializeToString())
    elif name == "nul":  # onnx cuts the path at the NUL and loads model.onnx_data
        _relocate(model, location="model.onnx_data\0.pkl")
    elif name == "git-folder":  # .git is left out of the walk, so out of the lock
        (folder / ".git").mkdir()
        shutil.move(folder / "model.onnx_data", folder / ".git" / "data")
        _relocate(model, location=".git/data")
    elif name == "pickle-as-data":
        (folder / "model.onnx_data").write_bytes(PAYLOAD + b"\0" * 256)
    elif name == "pickle-named-data":
        shutil.move(folder / "model.onnx_data", folder / "pytorch_model.bin")
        _relocate(model, location="pytorch_model.bin")
    elif name == "unknown-field":  # protobuf skips it: a pickle rides along unparsed
        tail = b"\xc2\x3e" + bytes([len(PAYLOAD)]) + PAYLOAD  # field 1000, length-delimited
        model.write_bytes(model.read_bytes() + tail)
    elif name == "pickle-named-onnx":
        model.write_bytes(PAYLOAD)
    elif name == "truncated":
        model.write_bytes(model.read_bytes()[:-9])
    else:
        raise AssertionError(name)
    return folder


# case -> (onnx.load loads it, onnxruntime runs it): measured, and asserted again below.
LOADERS = {
    "traversal": (False, False), "absolute": (False, False), "symlink": (False, False),
    "hardlink": (False, True), "past-the-end": (False, False), "too-long": (False, False),
    "negative": (False, False), "missing": (False, False), "invalid-graph": (True, False),
    "pickle-named-onnx": (False, False), "truncated": (False, False),
    "nul": (True, True), "git-folder": (True, True), "pickle-as-data": (True, True),
    "pickle-named-data": (True, True), "unknown-field": (True, True),
}


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_the_scan_refuses_what_a_loader_refuses_and_what_hides_in_both(tmp_path, name):
    folder = _case(tmp_path, name)
    assert (_loads(folder / "model.onnx"), _runs(folder / "model.onnx")) == LOADERS[name]
    report = scan_paths([folder])
    assert _flagged(report), report.findings
    assert report.pickle_files  # so pickle_allowed: false refuses the folder too


def test_the_benign_twin_of_the_cases_is_data(tmp_path):
    folder = tmp_path / "twin"
    _external(folder)
    assert _loads(folder / "model.onnx") and _runs(folder / "model.onnx")
    report = scan_paths([folder])
    assert report.findings == [] and report.pickle_files == []


def test_a_model_scanned_without_its_data_is_not_proven(tmp_path):
    model = _external(tmp_path / "alone")
    report = scan_paths([model])
    assert _flagged(report) == {str(model)}
    assert "not a file of the scanned folder" in report.findings[0].message


def test_an_hf_cache_snapshot_is_read_as_onnxruntime_reads_it(tmp_path):
    """Every snapshot file is a symlink into blobs/: onnx.load refuses such external data,
    onnxruntime follows it, and so does the scan (the walk keeps links inside the repo)."""
    repo = tmp_path / "models--org--m"
    snapshot = repo / "snapshots" / ("a" * 40)
    source = tmp_path / "source"
    _external(source)
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in source.iterdir():
        blob = repo / "blobs" / file.name.replace(".", "-")
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    assert not _loads(snapshot / "model.onnx") and _runs(snapshot / "model.onnx")
    report = scan_paths([snapshot])
    assert report.findings == [] and report.pickle_files == []
