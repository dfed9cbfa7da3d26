"""The template grammar measured on real templates: every chat template of the pinned llama.cpp
tree (71 `.jinja` files next to a README in `models/templates/`, fetched into the real engine
cache and checked by `scripts/build-llamacpp.sh tree`, as the llama.cpp cross-checks do) gets
no finding at or above the default threshold (medium)."""

from __future__ import annotations

from pathlib import Path

from dflash_guard.severity import Severity
from dflash_guard.templates.grammar import check_template
from tests.support.llamacpp import _script


def test_every_llamacpp_template_passes_the_grammar() -> None:
    tree = Path(_script("tree", timeout=600))
    templates = sorted((tree / "models" / "templates").glob("*.jinja"))
    assert len(templates) == 71
    loud = {
        path.name: [f.message for f in check_template(path.read_text(encoding="utf-8"), path.name)
                    if f.severity >= Severity.medium]
        for path in templates
    }
    assert {name: messages for name, messages in loud.items() if messages} == {}
