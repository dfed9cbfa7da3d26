"""The one strict document reader lockfiles and policies share: `FILE:LINE: FIELD: MESSAGE`."""

from __future__ import annotations

import pytest

from dflash_guard.errors import InputError
from dflash_guard.schema import read_document

DOC = "name: a\nitems:\n  - {size: 1}\n  - {size: x}\n"


def _error(text: str, read) -> str:
    with pytest.raises(InputError) as info:
        read(read_document(text, "d.yaml"))
    return str(info.value)


def _items(top):
    f = top.mapping(("name", "items"), ("name",))
    f["name"].text()
    return [item.mapping(("size",)).required("size").typed(int) for item in f.entries("items")]


def test_a_valid_document_reads_and_a_wrong_type_names_line_and_field() -> None:
    assert _items(read_document(DOC.replace("size: x", "size: 2"), "d.yaml")) == [1, 2]
    assert _error(DOC, _items) == "d.yaml:4: items[1].size: expected int, got 'x'"


def test_duplicate_unknown_and_missing_keys_are_refused() -> None:
    assert _error("name: a\nname: b\n", _items) == "d.yaml:2: name: field given twice"
    assert _error("name: a\nnames: b\n", _items) == (
        "d.yaml:2: names: unknown field (allowed: name, items)")
    assert _error("items: []\n", _items) == "d.yaml:1: top level: missing required field 'name'"
    assert _error("name: a\nitems:\n  - {size: null}\n", _items) == (
        "d.yaml:3: items[0]: missing required field 'size'")


def test_python_tags_are_an_error_never_run() -> None:
    error = _error('name: !!python/object/apply:os.system ["false"]\n', _items)
    assert error.startswith("d.yaml:1: name: could not determine a constructor")


def test_bad_yaml_and_json_name_the_line() -> None:
    assert _error("name: [unclosed\n", _items).startswith("d.yaml:2: not valid YAML")
    assert _items(read_document('{"name": "a", "items": [{"size": 3}]}', "d.json")) == [3]
    assert read_document("", "d.yaml") is None


def test_lockfile_and_policy_errors_share_the_format(tmp_path) -> None:
    from dflash_guard.pins.lockfile import parse_lockfile
    from dflash_guard.trust.policy import parse_policy

    with pytest.raises(InputError, match=r"^l\.lock:1: lockfile_versions: unknown field"):
        parse_lockfile("lockfile_versions: 1\n", "l.lock")
    with pytest.raises(InputError, match=r"^p\.yaml:1: policy_versions: unknown field"):
        parse_policy("policy_versions: 1\n", "p.yaml")
