"""Formats real repositories ship (issue 33), accepted only when parsed whole by their own
parser: numeric `.npz`, sentencepiece `tokenizer.model`, model-card images. Each real file is
quiet; a truncated, padded or pickle-carrying one is still a possible pickle."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import gguf
import numpy as np
import pytest
from google.protobuf.message import DecodeError
from transformers.utils import sentencepiece_model_pb2_new as sentencepiece_pb2

from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from tests.support.llamacpp import _script
from tests.support.scan_builders import gadget_pickle

CORPUS = Path(__file__).parent / "corpus"


def _loud(folder: Path) -> set[tuple[str, str]]:
    return {(f.file, f.rule_id) for f in scan_paths([folder]).findings
            if f.severity >= Severity.medium}


def _folder(tmp_path: Path, label: str, files: dict[str, bytes]) -> Path:
    folder = tmp_path / label
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def test_numeric_npz_from_real_projects_is_quiet(tmp_path: Path, shared_vectors: Path) -> None:
    picklescan = shared_vectors / "picklescan" / "data2"
    real = {"int_arrays.npz": picklescan / "int_arrays.npz",
            "int_arrays_compressed.npz": picklescan / "int_arrays_compressed.npz",
            "scipy.npz": CORPUS / "formats" / "scipy-bug-1310.npz"}
    folder = tmp_path / "real"
    folder.mkdir()
    for name, source in real.items():
        shutil.copyfile(source, folder / name)
    report = scan_paths([folder])
    assert [f for f in report.findings if f.severity >= Severity.medium] == []
    assert report.pickle_files == []
    objects = tmp_path / "objects"
    objects.mkdir()
    shutil.copyfile(picklescan / "object_arrays.npz", objects / "object_arrays.npz")
    assert scan_paths([objects]).pickle_files == ["object_arrays.npz"]  # pickles, for the policy


def test_npz_that_is_not_wholly_numeric_is_a_possible_pickle(tmp_path: Path) -> None:
    good = io.BytesIO()
    np.savez(good, a=np.arange(6, dtype=np.int64))
    data = good.getvalue()
    with_pickle = io.BytesIO()
    with zipfile.ZipFile(with_pickle, "w") as archive:
        archive.writestr("a.npy", data[data.index(b"\x93NUMPY"):])  # not the real member bytes
        archive.writestr("data.pkl", gadget_pickle("os", "system"))
    padded = io.BytesIO()
    array = io.BytesIO()
    np.save(array, np.arange(6, dtype=np.int64))
    with zipfile.ZipFile(padded, "w") as archive:
        archive.writestr("a.npy", array.getvalue() + b"trailing")
    cases = {"truncated.npz": data[:-40], "pickle-member.npz": with_pickle.getvalue(),
             "padded.npz": padded.getvalue()}
    for name, payload in cases.items():
        folder = _folder(tmp_path, name, {name: payload})
        assert any(rule in {"DG-FORMAT-UNKNOWN", "DG-PICKLE-DANGEROUS-GLOBAL", "DG-UNSCANNABLE"}
                   for _, rule in _loud(folder)), name
    assert (_loud(_folder(tmp_path, "good", {"w.npz": data}))) == set()


def _spm_from_the_pinned_vocab() -> bytes:
    """The llama-spm vocabulary of the pinned llama.cpp tree (LLaMA's published tokenizer.model,
    kept there as a vocab GGUF), serialized with sentencepiece's own schema (transformers ships
    its generated `sentencepiece_model_pb2`)."""
    tree = Path(_script("tree", timeout=600))
    fields = gguf.GGUFReader(tree / "models" / "ggml-vocab-llama-spm.gguf").fields
    tokens, scores = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.scores"]
    types = fields["tokenizer.ggml.token_type"]
    model = sentencepiece_pb2.ModelProto()
    for index in range(len(tokens.data)):
        piece = model.pieces.add()
        piece.piece = bytes(tokens.parts[tokens.data[index]]).decode("utf-8")
        piece.score = float(scores.parts[scores.data[index]][0])
        piece.type = int(types.parts[types.data[index]][0])
    model.trainer_spec.model_type = sentencepiece_pb2.TrainerSpec.BPE
    model.trainer_spec.vocab_size = len(model.pieces)
    model.normalizer_spec.name = "identity"
    return bytes(model.SerializeToString())


def test_sentencepiece_model_parsed_whole_is_quiet(tmp_path: Path) -> None:
    data = _spm_from_the_pinned_vocab()
    assert len(sentencepiece_pb2.ModelProto.FromString(data).pieces) == 32000
    report = scan_paths([_folder(tmp_path, "good", {"tokenizer.model": data})])
    # built here from a vocabulary, it is no published file: no upstream vouches for it
    assert [f for f in report.findings if f.severity >= Severity.medium
            and f.rule_id != "DG-UPSTREAM-NONE"] == []
    assert report.pickle_files == []
    unknown_field = b"\x80\x02" + data  # tag 32: protobuf skips it, and \x80\x02 is PROTO 2
    cases = {"truncated": data[: len(data) // 2], "garbage": b"\x0a\x0b\x0c" * 20,
             "unknown-field": unknown_field, "pickle": gadget_pickle("os", "system")}
    for label in ("truncated", "garbage"):  # the real schema refuses them too
        with pytest.raises(DecodeError):
            sentencepiece_pb2.ModelProto.FromString(cases[label])
    for label, payload in cases.items():
        loud = _loud(_folder(tmp_path, label, {"tokenizer.model": payload}))
        assert ("tokenizer.model", "DG-FORMAT-UNKNOWN") in loud or (
            "tokenizer.model", "DG-PICKLE-DANGEROUS-GLOBAL") in loud, label


def test_model_card_images_are_quiet_and_broken_ones_are_not(tmp_path: Path) -> None:
    tree = Path(_script("tree", timeout=600))
    images = [p for p in sorted(tree.rglob("*"))
              if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp") and p.is_file()]
    images += sorted((CORPUS / "formats").glob("*.gif"))  # CPython's IDLE icons
    assert {p.suffix.lower() for p in images} == {".png", ".jpg", ".jpeg", ".webp", ".gif"}
    folder = tmp_path / "real"
    folder.mkdir()
    for number, path in enumerate(images):
        shutil.copyfile(path, folder / f"{number}-{path.name}")
    report = scan_paths([folder])
    assert [f for f in report.findings if f.severity >= Severity.medium] == []
    assert report.pickle_files == []
    png = next(p for p in images if p.suffix == ".png").read_bytes()
    jpeg = next(p for p in images if p.suffix == ".jpeg").read_bytes()
    webp = next(p for p in images if p.suffix == ".webp").read_bytes()
    gif = next(p for p in images if p.suffix == ".gif").read_bytes()
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("archive/data.pkl", gadget_pickle("os", "system"))
    broken = {"truncated.png": png[:-20], "crc.png": png[:40] + bytes([png[40] ^ 1]) + png[41:],
              "tail.png": png + b"x", "truncated.jpeg": jpeg[: len(jpeg) // 2],
              "tail.jpeg": jpeg + gadget_pickle("os", "system"), "truncated.webp": webp[:-10],
              "truncated.gif": gif[:-5], "tail.gif": gif + b"cos\nsystem\n",
              "zip-after.png": png + zipped.getvalue()}
    for name, payload in broken.items():
        report = scan_paths([_folder(tmp_path, name, {name: payload})])
        assert any(f.severity >= Severity.high for f in report.findings), name
        assert report.pickle_files == [name]  # a possible pickle, whatever its name
