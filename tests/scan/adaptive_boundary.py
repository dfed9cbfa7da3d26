"""Adaptive cases of issue 33, written after reading the format-by-parse probe, the loader
channels and the format parsers: each malicious layout as `(name, class, lay, culprit)`, and
benign twins from published files. `adaptive.py` adds them to its corpus."""

from __future__ import annotations

import io
import json
import pickle
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

Layout = Callable[[Path], None]
CORPUS = Path(__file__).parent / "corpus"


class _System:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("id",))


def _write(folder: Path, relative: str, data: bytes | str) -> None:
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def _protocol0_torch(folder: Path) -> None:
    """A legacy torch file at protocol 0 (all printable), the payload in its fourth stream,
    under the name users pass to torch.load."""
    out = io.BytesIO()
    for obj in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001}, _System(), []):
        pickle.dump(obj, out, protocol=0)
    _write(folder, "checkpoint.pth.tar", out.getvalue())


def _calls_before_fault(folder: Path) -> None:
    """Text with no STOP whose REDUCE has run by the time the unpickler faults."""
    _write(folder, "training_notes.txt", "cos\nsystem\n(S'id'\ntR\n# notes follow\n")


def _custom_pipeline_remote(folder: Path) -> None:
    _write(folder, "pipeline/config.json", json.dumps({"custom_pipelines": {
        "text-generation": {"impl": "evil/pipes--pipe.Pipeline", "pt": "AutoModelForCausalLM"}}}))


def _modules_json_type(folder: Path) -> None:
    _write(folder, "embedder/modules.json", json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pool", "type": "custom_pool.Pooling"}]))


def _catastrophic_regex(folder: Path) -> None:
    _write(folder, "extra/tokenizer.json", json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "post_processor": None, "decoder": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a+)+b"},
                          "behavior": "Isolated", "invert": False},
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}))


def _image_with_zip(folder: Path) -> None:
    """A valid PNG with a torch zip appended: the image parses, zip readers find the archive."""
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (len(body).to_bytes(4, "big") + kind + body
                + zlib.crc32(kind + body).to_bytes(4, "big"))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", bytes([0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0]))
           + chunk(b"IDAT", zlib.compress(b"\x00\x00")) + chunk(b"IEND", b""))
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("archive/data.pkl", b"\x80\x04cos\nsystem\nX\x02\x00\x00\x00id\x85R.")
    _write(folder, "assets/banner.png", png + archive.getvalue())


def _npz_with_pickle(folder: Path) -> None:
    import numpy as np

    array = io.BytesIO()
    np.save(array, np.arange(4, dtype=np.float32))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mean.npy", array.getvalue())
        archive.writestr("stats.pkl", b"\x80\x04cos\nsystem\nX\x02\x00\x00\x00id\x85R.")
    _write(folder, "normalizer.npz", out.getvalue())


MALICIOUS: list[tuple[str, str, Layout, str]] = [
    ("protocol0-torch-tar", "formats", _protocol0_torch, "checkpoint.pth.tar"),
    ("text-calls-before-fault", "formats", _calls_before_fault, "training_notes.txt"),
    ("image-with-zip", "formats", _image_with_zip, "assets/banner.png"),
    ("npz-with-pickle-member", "formats", _npz_with_pickle, "normalizer.npz"),
    ("custom-pipelines-remote", "channels", _custom_pipeline_remote, "pipeline/config.json"),
    ("modules-json-custom-type", "channels", _modules_json_type, "embedder/modules.json"),
    ("tokenizer-catastrophic-regex", "channels", _catastrophic_regex, "extra/tokenizer.json"),
]


def _published_formats(folder: Path) -> None:
    """SciPy's numeric .npz and picklescan's benign numeric .npz vectors."""
    shutil.copyfile(CORPUS / "formats" / "scipy-bug-1310.npz", folder / "scipy.npz")
    vectors = Path(__file__).parents[1] / "vectors" / "picklescan" / "data2"
    shutil.copyfile(vectors / "int_arrays_compressed.npz", folder / "int_arrays.npz")


def _published_channels(folder: Path) -> None:
    """sentence-transformers' all-MiniLM-L6-v2 modules.json, as its docs print it."""
    _write(folder, "embedder/modules.json", json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}], indent=2))


BENIGN: list[tuple[str, str, Layout]] = [
    ("published-npz", "formats", _published_formats),
    ("published-modules-json", "channels", _published_channels),
]
