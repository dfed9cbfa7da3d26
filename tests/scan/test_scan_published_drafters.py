"""The published DFlash drafter files pass as they are (issue 46): z-lab's drafter code (the
`dflash.py` and `utils.py` its Hub drafters ship, `model/` of z-lab/dflash) beside each drafter
config SpecForge publishes (`configs/*-dflash.json`), vendored in `tests/vectors/`. Its
`utils.py` downloads datasets in a benchmark helper nothing calls at load: reported low, not
reached. Each has a bad twin that is still refused: the same helper called from the `auto_map`
class's `__init__`, and a `.model` file that is neither tiktoken's nor sentencepiece's."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from dflash_guard import rules
from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from tests.support.trust import copy_folder, relock, write_lock, write_policy

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
ZLAB = VECTORS / "zlab-dflash" / "model"
CONFIGS = sorted((VECTORS / "specforge" / "configs").glob("*-dflash.json"))


def _drafter(folder: Path, config: Path, dflash: str | None = None) -> Path:
    """z-lab's Hub drafter layout: config.json (auto_map dflash.DFlashDraftModel), dflash.py,
    utils.py."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config, folder / "config.json")
    shutil.copyfile(ZLAB / "utils.py", folder / "utils.py")
    if dflash is None:
        shutil.copyfile(ZLAB / "dflash.py", folder / "dflash.py")
    else:
        (folder / "dflash.py").write_text(dflash)
    return folder


def _digests(folder: Path) -> frozenset[str]:
    return frozenset(hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.py"))


def test_the_vectors_are_there() -> None:
    assert len(CONFIGS) >= 8
    assert all(json.loads(c.read_text())["auto_map"]["AutoModel"] == "dflash.DFlashDraftModel"
               for c in CONFIGS)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.stem)
def test_published_drafter_files_pass_the_scan(tmp_path: Path, config: Path) -> None:
    folder = _drafter(tmp_path, config)
    unreviewed = scan_paths([folder])
    assert not [f for f in unreviewed.findings if f.severity >= Severity.medium], \
        unreviewed.findings
    downloads = [f for f in unreviewed.findings if f.rule_id == rules.RC_NETWORK.id]
    assert downloads and all(f.file == "utils.py" and "not reached at load" in f.message
                             for f in downloads)
    reviewed = scan_paths([folder], reviewed_sha256=_digests(folder))
    assert reviewed.passed and not reviewed.fails(Severity.low), reviewed.findings
    assert all(reviewed.for_reviewer(f) for f in downloads)


def test_the_bad_twin_reaches_the_download_from_init(tmp_path: Path) -> None:
    source = (ZLAB / "dflash.py").read_text()
    hook = "        super().__init__(config)\n"
    assert hook in source
    crafted = source.replace(hook, hook + "        load_and_process_dataset('gsm8k')\n", 1)
    crafted = crafted.replace("from .utils import ",
                              "from .utils import load_and_process_dataset, ", 1)
    folder = _drafter(tmp_path, CONFIGS[0], crafted)
    report = scan_paths([folder])
    reached = [f for f in report.findings if f.rule_id == rules.RC_NETWORK.id
               and f.severity >= Severity.high]
    assert reached and all("the loader reaches it" in f.message for f in reached)
    assert report.fails(Severity.high)


def test_published_drafter_code_is_approved_by_default_once_reviewed(tmp_path, locked_pair):
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    config = json.loads((drafter / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
    (drafter / "config.json").write_text(json.dumps(config))
    for name in ("dflash.py", "utils.py"):
        shutil.copyfile(ZLAB / name, drafter / name)
    lock = write_lock(relock(locked_pair, drafter), tmp_path / "dflash.lock")
    roots = {"target": locked_pair.target, "drafter": drafter}
    refused = run_gate(GateOptions(lock, write_policy(tmp_path / "plain"), roots,
                                   out=tmp_path / "refused.json"))
    assert not refused.approved and "utils.py" in refused.reason
    policy = write_policy(tmp_path / "policy", reviewed=tuple(_digests(drafter)))
    result = run_gate(GateOptions(lock, policy, roots, out=tmp_path / "approval.json"))
    assert result.approved, result.reason


def _ranks(tokens: list[bytes]) -> bytes:
    return b"".join(base64.b64encode(t) + b" %d\n" % rank for rank, t in enumerate(tokens))


def test_a_tiktoken_rank_file_named_model_is_read_as_tiktoken(tmp_path: Path) -> None:
    # tiktoken/load.py load_tiktoken_bpe's format: every byte, then merges (cl100k's first
    # lines are `IQ== 0`, `Ig== 1`: bytes 0x21, 0x22)
    tokens = [bytes([b]) for b in [*range(0x21, 0x100), *range(0x21)]] + [b" the", b"ing"]
    (tmp_path / "tiktoken.model").write_bytes(_ranks(tokens))
    assert _ranks(tokens).startswith(b"IQ== 0\nIg== 1\n")
    report = scan_paths([tmp_path])
    assert report.findings == [] and report.pickle_files == []


def test_a_model_file_neither_tiktoken_nor_sentencepiece_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tiktoken.model").write_bytes(_ranks([b"a", b"b"]) + b"not-base64! 2\n")
    report = scan_paths([tmp_path])
    assert any(f.rule_id == rules.FORMAT_UNKNOWN.id and f.severity >= Severity.high
               for f in report.findings), report.findings
