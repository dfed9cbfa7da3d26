"""False alarms of issue 24, removed: joblib-saved numpy arrays (raw array bytes between pickle
opcodes, skipped by the size the wrapper's state gives) and control tokens as mask candidates.

The three `.joblib` files in tests/scan/corpus/joblib/ were written by `joblib.dump` (joblib
1.6.0, numpy 2): a float32 vector, a dict of int64/float16 arrays, an object array (a pickle
inside the pickle)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.scan.drafter import reserved_token_ids
from dflash_guard.severity import Severity
from tests.support.scan_builders import gadget_pickle, make_pair, write_json

JOBLIB = Path(__file__).parent / "corpus" / "joblib"
SYSTEM = b"\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R."  # STACK_GLOBAL os.system('id')


@pytest.mark.parametrize("name", sorted(p.name for p in JOBLIB.glob("*.joblib")))
def test_joblib_arrays_are_low(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes((JOBLIB / name).read_bytes())
    report = scan_paths([tmp_path])
    assert [f for f in report.findings if f.severity >= Severity.medium] == []
    assert report.pickle_files == [name]  # still a pickle: the policy's pickle_allowed decides


def _bad(tmp_path: Path, data: bytes) -> list[str]:
    (tmp_path / "x.joblib").write_bytes(data)
    return [f.rule_id for f in scan_paths([tmp_path]).findings if f.severity >= Severity.high]


def test_a_gadget_after_the_array_bytes_is_seen(tmp_path: Path) -> None:
    data = (JOBLIB / "float32_vector.joblib").read_bytes()
    assert data.endswith(b".")
    assert "DG-PICKLE-DANGEROUS-GLOBAL" in _bad(tmp_path, data[:-1] + SYSTEM)


def test_an_array_claiming_more_bytes_than_the_file_holds(tmp_path: Path) -> None:
    data = (JOBLIB / "float32_vector.joblib").read_bytes()
    assert "DG-PICKLE-INVALID" in _bad(tmp_path, data[:-100])


def test_a_gadget_inside_an_object_array(tmp_path: Path) -> None:
    data = (JOBLIB / "object_array.joblib").read_bytes()
    head = data[: data.index(b"ub\x80") + 2]  # up to the wrapper's BUILD
    inner = gadget_pickle("os", "system")
    assert "DG-PICKLE-DANGEROUS-GLOBAL" in _bad(tmp_path, head + inner + b".")


def test_an_unreadable_dtype_fails_closed(tmp_path: Path) -> None:
    data = (JOBLIB / "float32_vector.joblib").read_bytes().replace(b"\x8c\x02f4", b"\x8c\x02??")
    assert "DG-PICKLE-INVALID" in _bad(tmp_path, data)


# -- control tokens: never the mask; a free reserved token may be ----------------------------
_TEMPLATE = ("{% for m in messages %}<｜{{ m.role }}｜>{{ m.content }}{% endfor %}"
             "<｜Assistant｜><think>\n</think>\n<|reserved_special_token_7|>")


def _target(tmp_path: Path) -> Path:
    target, _ = make_pair(tmp_path)
    write_json(target / "tokenizer_config.json", {
        "chat_template": _TEMPLATE,
        "added_tokens_decoder": {
            "10": {"content": "</think>", "special": False},
            "11": {"content": "<｜Assistant｜>", "special": False},
            "12": {"content": "<|reserved_special_token_5|>", "special": True},
            "13": {"content": "<|reserved_special_token_7|>", "special": True},
            "14": {"content": "<think>", "special": False},
        },
    })
    return target


def test_control_tokens_of_every_spelling_are_reserved(tmp_path: Path) -> None:
    reserved = reserved_token_ids(_target(tmp_path))
    assert {10, 11, 13, 14} <= set(reserved)  # closing tag, full-width bars, a named reserved
    assert 12 not in reserved  # a free <|reserved_special_token_N|> may be the mask


@pytest.mark.parametrize(("mask", "refused"), [(10, True), (11, True), (12, False)])
def test_the_mask_against_control_tokens(tmp_path: Path, mask: int, refused: bool) -> None:
    target = _target(tmp_path)
    drafter = tmp_path / "drafter"
    config = drafter / "config.json"
    value = json.loads(config.read_text())
    value["dflash_config"]["mask_token_id"] = mask
    config.write_text(json.dumps(value))
    rules = {f.rule_id for f in scan_paths([drafter], target=target).findings
             if f.severity >= Severity.high}
    assert ("DG-DRAFTER-MASK" in rules) is refused, rules
