"""A file's format is what its parser says (issue 33): the pickle parse over every stream decides
whether text is a pickle, not its first byte or its name."""

from __future__ import annotations

import io
import pickle
import pickletools
from pathlib import Path

from dflash_guard.scan import scan_paths
from dflash_guard.scan.pickle.stream import read_stream
from dflash_guard.severity import Severity
from tests.support.llamacpp import _script


class _System:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("id",))


def _loud(report: object) -> set[tuple[str, str]]:
    return {(f.file, f.rule_id) for f in report.findings  # type: ignore[attr-defined]
            if f.severity >= Severity.medium}


def _legacy_protocol0(payload_at: int) -> bytes:
    """A legacy torch file saved with protocol 0: all printable ASCII, five stacked pickles
    (magic, protocol, sys_info, object, storage keys), the payload in stream `payload_at`."""
    streams: list[object] = [0x1950A86A20F9469CFC6C, 1001,
                             {"protocol_version": 1001, "little_endian": True}, {}, []]
    streams[payload_at] = _System()
    out = io.BytesIO()
    for obj in streams:
        pickle.dump(obj, out, protocol=0)
    return out.getvalue()


def test_a_printable_protocol0_torch_file_is_a_pickle_whatever_its_name(tmp_path: Path) -> None:
    data = _legacy_protocol0(payload_at=3)
    assert all(32 <= b < 127 or b == 10 for b in data)  # text by every byte-level test
    for name in ("checkpoint.pth.tar", "model.weights", "README.txt"):
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        (folder / name).write_bytes(data)
        report = scan_paths([folder])
        assert (name, "DG-PICKLE-DANGEROUS-GLOBAL") in _loud(report), name
        assert report.pickle_files == [name]


def test_the_probe_reads_every_stream_not_the_first(tmp_path: Path) -> None:
    for at in (1, 2, 4):  # the first stream is a plain int: the payload sits later
        (tmp_path / "checkpoint.pth.tar").write_bytes(_legacy_protocol0(payload_at=at))
        assert ("checkpoint.pth.tar", "DG-PICKLE-DANGEROUS-GLOBAL") in _loud(
            scan_paths([tmp_path])), at


def test_text_that_calls_before_its_fault_is_a_pickle(tmp_path: Path) -> None:
    """No STOP, but the unpickler has run os.system('id') by the time it faults."""
    (tmp_path / "notes.txt").write_bytes(b"cos\nsystem\n(S'id'\ntR\n# no STOP follows\n")
    report = scan_paths([tmp_path])
    assert {("notes.txt", "DG-PICKLE-DANGEROUS-GLOBAL"),
            ("notes.txt", "DG-PICKLE-INVALID")} <= _loud(report)


def test_text_starting_with_an_opcode_letter_is_text(tmp_path: Path) -> None:
    """The two false alarms: a YAML config and a requirements file whose first letter is GLOBAL."""
    (tmp_path / "config.yaml").write_text("checkpoint: model.bin\nname: llama\nlayers: 32\n")
    (tmp_path / "requirements.txt").write_text("click\nrequests\ntorch>=2.0\n")
    assert read_stream(io.BytesIO(b"click\nrequests\ntorch>=2.0\n")).globals  # GLOBAL lick.requests
    report = scan_paths([tmp_path])
    assert _loud(report) == set()
    assert report.pickle_files == []


def test_real_text_files_starting_with_opcode_letters_stay_quiet(tmp_path: Path) -> None:
    """Benign twins from the pinned llama.cpp tree: every CMakeLists.txt, requirements file and
    YAML that starts with `c` (GLOBAL) or `i` (INST)."""
    tree = Path(_script("tree", timeout=600))
    texts = [p for p in sorted(tree.rglob("*")) if p.suffix in (".txt", ".yaml", ".yml", ".md")
             and p.is_file() and p.read_bytes()[:1] in (b"c", b"i")]
    assert len(texts) >= 10
    with_globals = 0
    for number, path in enumerate(texts):
        (tmp_path / f"{number}-{path.name}").write_bytes(path.read_bytes())
        with_globals += bool(read_stream(io.BytesIO(path.read_bytes())).globals)
    assert with_globals >= 5  # the pickle parse does read an import at their start
    report = scan_paths([tmp_path])
    assert _loud(report) == set()
    assert report.pickle_files == []


def test_a_complete_pickle_in_text_is_a_pickle(tmp_path: Path) -> None:
    data = pickle.dumps({"lr": 1}, protocol=0)
    pickletools.dis(data, out=io.StringIO())
    (tmp_path / "hparams.txt").write_bytes(data)
    assert scan_paths([tmp_path]).pickle_files == ["hparams.txt"]


def test_text_importing_hub_code_before_its_fault_is_a_pickle(tmp_path: Path) -> None:
    """Importing transformers' cache of another repo's code runs it, even with no call after."""
    (tmp_path / "notes.txt").write_bytes(b"ctransformers_modules.evil.mod\nX\n# no STOP\n")
    assert ("notes.txt", "DG-PICKLE-GLOBAL") in _loud(scan_paths([tmp_path]))
