"""The capability report names capabilities: each helper case of `adaptive_capabilities` gets a
finding at `high` or above whose message starts with the capability it reaches (at module level
and inside a method), its twins stay below `medium`, and the published modeling code of the
corpus reports exactly the (low) capabilities it has."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dflash_guard.scan.code.capabilities import ENTRIES, RULE_LABELS, Capability, find
from dflash_guard.scan.code.remote_code import check_source
from dflash_guard.severity import Severity
from dflash_guard.trust.review import CodeToReview
from tests.scan.adaptive_capabilities import CASES, TWINS

CORPUS = Path(__file__).parent / "corpus" / "remote_code"


def _in_method(payload: str) -> str:
    return "class Head:\n    def forward(self, x):\n" + textwrap.indent(payload, "        ")


@pytest.mark.parametrize("where", ["module level", "method"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_helper_case_names_its_capability(name: str, where: str) -> None:
    words, payload = CASES[name]
    source = payload if where == "module level" else _in_method(payload)
    loud = [f for f in check_source(source.encode(), "x.py") if f.severity >= Severity.high]
    assert any(f.message.startswith(words) for f in loud), [f.message for f in loud]


@pytest.mark.parametrize("name", sorted(TWINS))
def test_twin_using_the_same_helper_is_quiet(name: str) -> None:
    findings = check_source(TWINS[name].encode(), "x.py")
    assert [f.message for f in findings if f.severity >= Severity.medium] == []


def test_the_corpus_reaches_every_capability() -> None:
    words = {w for w, _ in CASES.values()}
    for capability in Capability:
        assert any(capability.value in w for w in words), capability
    assert len(CASES) >= 15


def test_every_catalog_entry_says_where_its_behaviour_comes_from() -> None:
    for entry in ENTRIES:
        assert entry.patterns and entry.capabilities and entry.does
        assert len(entry.source) > 20, entry.patterns  # a file or document, not a word


def test_conditional_entries_need_their_argument() -> None:
    assert find("numpy.loadtxt") is None  # a local file is data
    assert find("transformers.AutoModel.from_pretrained") is None  # a local folder is not a repo
    assert find("timm.create_model") is None
    hit = find("torch.utils.model_zoo.load_url")
    assert hit is not None and hit.capabilities[0] is Capability.load_code


# What the published files report, at any severity (all low: save-time writes, settings, a
# tokenizer's decoded vocabulary, a torch.load that is weights-only under torch >= 2.6).
PUBLISHED = {
    "baichuan2-13b-chat/modeling_baichuan.py": {"load or run code": ["low"]},
    "baichuan2-13b-chat/tokenization_baichuan.py": {"write files": ["low"]},
    "chatglm2-6b/modeling_chatglm.py": {"patch other code": ["low"]},
    "chatglm2-6b/tokenization_chatglm.py": {"write files": ["low"]},
    "chatglm3-6b/tokenization_chatglm.py": {"write files": ["low"]},
    "internlm2/modeling_internlm2.py": {"patch other code": ["low"]},
    "internvl2-4b/modeling_phi3.py": {"patch other code": ["low"]},
    "qwen-7b-chat/modeling_qwen.py": {"patch other code": ["low"]},
    "qwen-7b-chat/tokenization_qwen.py": {"hide a payload": ["low"], "write files": ["low"]},
    "qwen-vl-chat-int4/modeling_qwen.py": {"patch other code": ["low"]},
}


@pytest.mark.parametrize("relative", sorted(str(p.relative_to(CORPUS))
                                            for p in CORPUS.rglob("*.py")))
def test_published_code_reports_what_it_does(relative: str) -> None:
    found: dict[str, set[str]] = {}
    for finding in check_source((CORPUS / relative).read_bytes(), relative):
        if finding.rule_id in RULE_LABELS:
            assert finding.message.startswith(RULE_LABELS[finding.rule_id]) or any(
                finding.message.startswith(c.value) for c in Capability), finding.message
            found.setdefault(RULE_LABELS[finding.rule_id], set()).add(finding.severity.name)
    assert {k: sorted(v) for k, v in found.items()} == PUBLISHED.get(relative, {})


def test_review_summarises_what_a_file_can_do() -> None:
    source = CASES["hfapi-instance-upload"][1] + CASES["distutils-spawn-alias"][1]
    findings = tuple(check_source(source.encode(), "x.py"))
    code = CodeToReview("drafter", "x.py", "0" * 64, findings, True)
    assert code.can[:2] == ("spawn a process", "connect to the network")
    assert CodeToReview("drafter", "y.py", "0" * 64, (), True).can == ()
