"""Random and mutated chat templates and Python sources never crash or hang the analysers.

Seeds are real corpus files (a template, a tokenizer); mutations splice in the tokens attacks
use. Each example runs in a fraction of a second; a hang shows as a test that never ends, and a
crash as an exception other than a finding.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_guard.findings import Finding
from dflash_guard.scan.code.remote_code import check_source
from dflash_guard.templates.grammar import check_template

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CORPUS = Path(__file__).parent / "corpus"
TEMPLATE_SEED = (CORPUS / "templates" / "chatml.jinja").read_text()
PYTHON_SEED = (CORPUS / "remote_code" / "qwen-7b-chat" / "tokenization_qwen.py").read_text()[:4000]
TEMPLATE_PIECES = ["{{", "}}", "{%", "%}", "{#", "#}", "__class__", "|attr(", "'_'", "~", "[",
                   "]", "(", ")", ".", "loop.", "namespace(", "{% set x %}", "{% endset %}",
                   "{% generation %}", "{% endgeneration %}", "{% break %}", "\\x5f", "|map(",
                   "attribute='a.b'", "{% for m in messages %}", "{% endfor %}", "\0"]
PYTHON_PIECES = ["import os as _\n", "f = _.popen\n", "getattr(", "eval(", "'os'", "(", ")", "[",
                 "]", ":", "\n    ", "sys.modules", "__builtins__", "from os import *\n", "@",
                 "lambda: ", "async ", "await ", "yield ", "global x\n", "\\", "'''", "\0"]


@st.composite
def spliced(draw, seed: str, pieces: list[str]) -> str:
    """`seed` with pieces inserted and spans cut, or plain random text."""
    if draw(st.booleans()):
        return draw(st.text(max_size=300))
    text = seed
    for _ in range(draw(st.integers(1, 6))):
        position = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:position] + draw(st.sampled_from(pieces)) + text[position:]
        else:
            text = text[:position] + text[position + draw(st.integers(0, 40)):]
    return text


def _all_findings(findings: list[Finding]) -> None:
    assert all(isinstance(f, Finding) for f in findings)


@FUZZ
@given(spliced(TEMPLATE_SEED, TEMPLATE_PIECES))
def test_template_analyser_never_crashes(template: str) -> None:
    _all_findings(check_template(template, "t.jinja"))


@FUZZ
@given(spliced(PYTHON_SEED, PYTHON_PIECES))
def test_remote_code_analyser_never_crashes(source: str) -> None:
    _all_findings(check_source(source.encode("utf-8", "surrogatepass"), "m.py"))


@FUZZ
@given(st.integers(1, 6000), st.sampled_from(["{{ x", "{% if x %}", "[", "(", "x."]))
def test_deep_nesting_is_a_finding_not_a_crash(depth: int, opener: str) -> None:
    _all_findings(check_template(opener * depth, "t.jinja"))
    _all_findings(check_source(("x = " + "(" * depth + "1" + ")" * depth).encode(), "m.py"))


def test_nested_literal_eval_is_bounded() -> None:
    source = "eval('1')"
    for _ in range(12):
        source = f"eval({source!r})"
    findings = check_source(source.encode(), "m.py")
    assert any("nested too deeply" in f.message for f in findings)
