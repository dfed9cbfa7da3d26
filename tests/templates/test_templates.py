"""Chat templates: SSTI shapes flagged statically; realistic templates stay quiet."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from dflash_guard.templates.grammar import check_template
from tests.support.scan_builders import write_json

# The shape of Qwen3's chat template (abridged): namespaces, slicing, filters, method calls.
BENIGN = """{%- if tools %}{{- '<|im_start|>system\\n' }}{%- for tool in tools %}
{{- tool | tojson }}{%- endfor %}{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}
{%- if ns.multi_step_tool and message.role == "user" %}{%- set ns.multi_step_tool = false %}
{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}
{%- for message in messages %}{%- set content = message.content %}
{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}
{%- endif %}{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
{%- if message.tool_calls %}{%- for tool_call in message.tool_calls %}
{{- tool_call.function.name }}{{- tool_call['function']['arguments'] | tojson }}
{%- endfor %}{%- endif %}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

SSTI = {
    "cve-2024-34359": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "subscript-dunder": "{{ ''['__class__'] }}",
    "attr-filter": "{{ ''|attr('x') }}",
    "escaped": "{{ ''['\\x5f\\x5fclass\\x5f\\x5f'] }}",
    "computed": "{{ x[('_' * 2) ~ 'class' ~ ('_' * 2)] }}",
    "lipsum-globals": "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "cycler": "{{ cycler.__init__.__globals__.os.popen('id') }}",
}


def test_realistic_template_is_clean() -> None:
    assert check_template(BENIGN, "t") == []


@pytest.mark.parametrize("name", sorted(SSTI))
def test_ssti_shapes_are_high_or_worse(name: str) -> None:
    findings = check_template(SSTI[name], "t")
    assert max(f.severity for f in findings) >= Severity.high, findings


def test_syntax_error_is_a_finding() -> None:
    findings = check_template("{% for x in %}", "t")
    assert [f.rule_id for f in findings] == ["DG-TPL-SYNTAX"]


def test_template_sources_in_a_folder(tmp_path: Path) -> None:
    write_json(
        tmp_path / "tokenizer_config.json",
        {
            "chat_template": [
                {"name": "default", "template": BENIGN},
                {"name": "tool_use", "template": SSTI["cve-2024-34359"]},
            ]
        },
    )
    (tmp_path / "chat_template.jinja").write_text(SSTI["attr-filter"])
    report = scan_paths([tmp_path])
    bad = {(f.file, f.member) for f in report.findings if f.severity >= Severity.high}
    assert ("tokenizer_config.json", "chat_template[tool_use]") in bad
    assert ("chat_template.jinja", None) in bad
    assert ("tokenizer_config.json", "chat_template[default]") not in bad


def test_string_template_in_tokenizer_config(tmp_path: Path) -> None:
    """A template of its own is clean but unreviewed (low) until its digest is reviewed."""
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": BENIGN}))
    # the file has no upstream either (tests/scan/test_upstream.py)
    found = [f for f in scan_paths([tmp_path]).findings if f.detector != "upstream"]
    assert [(f.rule_id, f.severity, f.member) for f in found] == [
        ("DG-TPL-UNREVIEWED", Severity.low, "chat_template")]
    digest = hashlib.sha256(BENIGN.encode()).hexdigest()
    assert digest in found[0].message
    assert [f for f in scan_paths([tmp_path], reviewed_templates=frozenset({digest})).findings
            if f.detector != "upstream"] == []


@pytest.mark.parametrize(
    "source",
    [
        "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
        "{% if a %}" * 3000 + "x" + "{% endif %}" * 3000,
    ],
)
def test_deeply_nested_template_is_unscannable_not_a_crash(source: str) -> None:
    findings = check_template(source, "chat_template.jinja")
    assert [(f.rule_id, f.severity) for f in findings] == [("DG-UNSCANNABLE", Severity.high)]


def test_a_template_with_a_lone_surrogate_is_judged_not_crashed_on(tmp_path: Path) -> None:
    """JSON can hold a lone surrogate (`\\ud800`) and Python's reader keeps it, as transformers
    does: the template is digested by its own bytes, unreviewed until that digest is."""
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}\\ud800"}')
    found = [f for f in scan_paths([tmp_path]).findings if f.detector != "upstream"]
    assert [f.rule_id for f in found] == ["DG-TPL-UNREVIEWED"]
    digest = hashlib.sha256("{{ messages }}\ud800".encode("utf-8", "surrogatepass")).hexdigest()
    assert [f for f in scan_paths([tmp_path], reviewed_templates=frozenset({digest})).findings
            if f.detector != "upstream"] == []
