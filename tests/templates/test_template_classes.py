"""Chat templates: one crafted case per bypass or false-alarm class, each with a benign twin,
and every place a template can live (string, list, dict, `.jinja`, GGUF key with a NUL)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from dflash_guard.templates.grammar import check_template
from tests.support.scan_builders import write_json

# class -> (rule, bad template, benign twin)
CASES = {
    "dunder built by ~": (
        "DG-TPL-COMPUTED-ATTR",
        "{% set u = '_' %}{{ x[u ~ u ~ 'class' ~ u ~ u] }}",
        "{{ message.role ~ ': ' ~ message.content }}",
    ),
    "dunder built by join": (
        "DG-TPL-COMPUTED-ATTR",
        "{{ x[['_', '_', 'class', '_', '_']|join] }}",
        "{{ ['a', 'b']|join(', ') }}",
    ),
    "dunder built by replace": (
        "DG-TPL-COMPUTED-ATTR",
        "{{ x['..class..'|replace('.', '_')] }}",
        "{{ content|replace('\\n', ' ') }}",
    ),
    "dunder built by format": (
        "DG-TPL-UNLISTED",
        "{{ x['%c%cclass%c%c'|format(95, 95, 95, 95)] }}",
        "{{ 'Today is ' ~ strftime_now('%d %b %Y') }}",
    ),
    "dunder in a set block": (
        "DG-TPL-DUNDER",
        "{% set k %}__class__{% endset %}{{ x[k] }}",
        "{% set k %}<|im_start|>{% endset %}{{ k }}",
    ),
    "subscript by a computed name": (
        "DG-TPL-COMPUTED-ATTR",
        "{{ x[name ~ 'obals'] }}",
        "{{ messages[loop.index0 + 1] if not loop.last }}",
    ),
    "map(attribute=) with a dotted path": (
        "DG-TPL-COMPUTED-ATTR",
        "{{ messages|map(attribute='content.upper.format')|list }}",
        "{{ messages|map(attribute='role')|list }}",
    ),
    "namespace as a stepping stone": (
        "DG-TPL-RISKY-GLOBAL",
        "{{ namespace.parent }}",
        "{% set ns = namespace(found=false) %}{% set ns.found = true %}{{ ns.found }}",
    ),
    "loop as a stepping stone": (
        "DG-TPL-RISKY-GLOBAL",
        "{% for m in messages %}{{ loop.renderfunc }}{% endfor %}",
        "{% for m in messages %}{{ loop.index0 }}{{ loop.last }}{% endfor %}",
    ),
    "cycler/joiner as stepping stones": (
        "DG-TPL-RISKY-GLOBAL",
        "{{ joiner.init }}{{ cycler.reset }}",
        "{% set sep = joiner(', ') %}{% for m in messages %}{{ sep() }}{{ m.role }}{% endfor %}",
    ),
    "raise_exception as a stepping stone": (
        "DG-TPL-RISKY-GLOBAL",
        "{{ raise_exception.func_code }}",
        "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}",
    ),
    "unlisted method": (
        "DG-TPL-UNLISTED",
        "{{ content.encode('rot13') }}",
        "{{ content.strip().split('</think>')[-1] }}",
    ),
    "unlisted test": (
        "DG-TPL-UNLISTED",
        "{% if x is callable %}{{ x() }}{% endif %}",
        "{% if tools is not none and tools is iterable %}{{ tools|tojson }}{% endif %}",
    ),
    "internal names as subscripts": (
        "DG-TPL-DUNDER",
        "{{ f['func_globals'] }}{{ x['mro'] }}",
        "{{ role_indicators['system'] ~ role_indicators['user'] }}",
    ),
    "|attr": (
        "DG-TPL-ATTR-FILTER",
        "{{ x|attr('role') }}",
        "{{ x['role'] }}",
    ),
}


def _at_least_medium(template: str) -> set[str]:
    return {f.rule_id for f in check_template(template, "t") if f.severity >= Severity.medium}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_case_is_caught(case: str) -> None:
    rule, bad, _ = CASES[case]
    assert rule in _at_least_medium(bad)


@pytest.mark.parametrize("case", sorted(CASES))
def test_benign_twin_stays_quiet(case: str) -> None:
    assert _at_least_medium(CASES[case][2]) == set()


def test_generation_tag_and_loop_controls_parse_as_transformers_parses_them() -> None:
    template = (
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{% if loop.index > 8 %}{% break %}{% endif %}"
        "{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    )
    assert check_template(template, "t") == []
    bad = "{% generation %}{{ ''.__class__ }}{% endgeneration %}"
    assert "DG-TPL-DUNDER" in {f.rule_id for f in check_template(bad, "t")}


SSTI = "{{ ''.__class__.__mro__[1].__subclasses__() }}"


@pytest.mark.parametrize(
    "config",
    [
        {"chat_template": SSTI},
        {"chat_template": [{"name": "default", "template": SSTI}]},
        {"chat_template": {"default": "{{ x }}", "tool_use": SSTI}},
    ],
    ids=["string", "list", "dict"],
)
def test_every_config_form_is_read(tmp_path: Path, config: dict) -> None:
    write_json(tmp_path / "tokenizer_config.json", config)
    report = scan_paths([tmp_path])
    assert "DG-TPL-DUNDER" in {f.rule_id for f in report.findings}


def test_chat_template_jinja_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text(SSTI)
    assert "DG-TPL-DUNDER" in {f.rule_id for f in scan_paths([tmp_path]).findings}


@pytest.mark.parametrize("key", ["tokenizer.chat_template", "tokenizer.chat_template\0"])
def test_gguf_template_key_with_trailing_nul_is_the_same_key(tmp_path: Path, key: str) -> None:
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string(key, SSTI)
    writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert "DG-TPL-DUNDER" in {f.rule_id for f in scan_paths([path]).findings}


def test_a_template_that_does_not_parse_is_still_read() -> None:
    bad = "{% unknowntag %}{{ ''.__class__ }}"
    assert {"DG-TPL-SYNTAX", "DG-TPL-DUNDER"} <= {f.rule_id for f in check_template(bad, "t")}
    twin = "{% unknowntag %}{{ message.content }}"
    assert {f.rule_id for f in check_template(twin, "t")} == {"DG-TPL-SYNTAX"}
