"""What a chat template costs and writes, by a bounded trial render (the `sandbox`
budget) on representative conversations, plus a static look at constant loop and width sizes.

- `rules.TPL_COST` (high): a trial render past the budget, or nested constant `range` loops, or a
  constant multiplier/width/range past it (so a cost behind a condition the trial conversations
  do not meet is still seen when its sizes are literal).
- `rules.TPL_INJECTED` (medium): a template that is not a known published one
  (`known.json`: the pinned llama.cpp tree's templates and the corpus's, by sha256,
  each with its source) and adds more than `INJECTED_WORDS` distinct words of its own, beyond
  role names and markup, to a conversation that has its own system message: an instruction the
  user never wrote. Published templates add long preambles there (Cohere's safety preamble,
  gpt-oss's channels), so a known digest is what tells them apart.
- `rules.TPL_EXFIL` (high): a markdown image or link, or an HTML `src`/`href`, whose URL points to
  another host and carries conversation text (a canary of the trial conversation, or a variable
  written into a remote image URL in the template text): a chat UI fetches it, sending the
  conversation there.

The trial sees the paths the trial conversations take; a cost or text behind a condition on
other content (a trigger word, a long conversation, computed sizes) is not seen. The first render
past the budget ends the trial (a hostile template costs the scan one budget, not one per
conversation), so what the later conversations would have shown is not reported beside it.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import nodes

from dflash_guard import rules
from dflash_guard.rules import Rule
from dflash_guard.severity import Severity
from dflash_guard.templates.sandbox import DEFAULT_BUDGET, TemplateRenderError, render_template

Problem = tuple[Rule, Severity, str]
CANARY = "dgcanary"
_SYSTEM = f"{CANARY}0 system"
_CONVERSATIONS: tuple[tuple[list[dict[str, Any]], dict[str, Any]], ...] = (
    ([{"role": "user", "content": f"{CANARY}1 hello"}], {}),
    ([{"role": "system", "content": _SYSTEM},
      {"role": "user", "content": f"{CANARY}2 question"},
      {"role": "assistant", "content": f"{CANARY}3 answer"},
      {"role": "user", "content": f"{CANARY}4 follow up"}], {}),
    ([{"role": "user", "content": f"{CANARY}5 weather"}],
     {"tools": [{"type": "function", "function": {
         "name": "get_weather", "description": f"{CANARY}6 tool",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}),
)
_VARIABLES = {"bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": True,
              "tools": None, "documents": None}
# A URL in a markdown image/link or an HTML attribute, to a host (`//host/...`).
_REMOTE_URL = re.compile(
    r"!?\[[^\]\n]*\]\(\s*<?((?:[a-z][a-z0-9+.-]*:)?//[^\s)>]+)"
    r"|(?:src|href|srcset)\s*=\s*[\"']?((?:[a-z][a-z0-9+.-]*:)?//[^\s\"'>]+)",
    re.IGNORECASE)
_REMOTE_IMAGE_TEXT = re.compile(r"!\[[^\]\n]*\]\(\s*<?(?:[a-z][a-z0-9+.-]*:)?//|<img\b",
                                re.IGNORECASE)
_MAX_CONSTANT = DEFAULT_BUDGET.value_chars
# Role markers and control tokens, removed before counting the words a template adds.
_MARKUP = re.compile(r"<[^<>\n]{1,60}>|\[/?[A-Za-z_ ]{2,30}\]|\{[^{}]*\}")
_WORD = re.compile(r"[^\W\d_]{2,}")
INJECTED_WORDS = 7
KNOWN_TEMPLATES = Path(__file__).with_name("known.json")


@cache
def known_templates() -> frozenset[str]:
    """The sha256 of every published template the tool ships a record of."""
    return frozenset(json.loads(KNOWN_TEMPLATES.read_text(encoding="utf-8")))


def template_sha256(source: str) -> str:
    """The digest a template is known and reviewed by: sha256 of its UTF-8 text (a lone
    surrogate, which a JSON string can hold and Python's reader keeps, as its own bytes)."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def is_known(source: str) -> bool:
    """Whether `source` is byte for byte a published template of the catalog."""
    return template_sha256(source) in known_templates()


def cost_problems(source: str, tree: nodes.Template) -> list[Problem]:
    """Cost and exfiltration problems of a template whose grammar passed."""
    problems = _static_problems(tree)
    worst: str | None = None
    for messages, extra in _CONVERSATIONS:
        try:
            text = render_template(source, "template", {"messages": messages, **_VARIABLES,
                                                        **extra})
        except TemplateRenderError as error:
            if error.over_budget:  # one spent budget is the finding: the trial ends there
                worst = str(error).removeprefix("template: ")
                break
            continue
        problems += _exfil_problems(text)
        if any(m["content"] == _SYSTEM for m in messages) and not is_known(source):
            problems += _injected_problems(text, messages)
    if worst is not None and not any(rule is rules.TPL_COST for rule, _, _ in problems):
        problems.append((rules.TPL_COST, Severity.high, f"a trial render on a short "
                         f"conversation {worst.removeprefix('the chat template ')}"))
    return list(dict.fromkeys(problems))


def _static_problems(tree: nodes.Template) -> list[Problem]:
    problems: list[Problem] = []
    product = _loop_cost(tree)
    if product > DEFAULT_BUDGET.steps:
        problems.append((rules.TPL_COST, Severity.high, f"nested constant loops run "
                         f"{product:,} times, past the budget of {DEFAULT_BUDGET.steps:,}"))
    for const in tree.find_all(nodes.Const):
        if isinstance(const.value, int) and not isinstance(const.value, bool) and (
                const.value > _MAX_CONSTANT):
            problems.append((rules.TPL_COST, Severity.high, f"the constant {const.value:,} "
                             "is past the budget's largest value (a width, repeat or range)"))
            break
    for data in tree.find_all((nodes.TemplateData, nodes.Const)):
        text = data.data if isinstance(data, nodes.TemplateData) else getattr(data, "value", "")
        if isinstance(text, str) and _REMOTE_IMAGE_TEXT.search(text):
            problems.append((rules.TPL_EXFIL, Severity.high, "writes a remote image (markdown "
                             "or <img>) into the prompt: a chat UI that echoes it fetches the "
                             "URL"))
            break
    return problems


def _loop_cost(node: nodes.Node) -> int:
    """The most iterations a chain of nested constant `range` loops under `node` runs."""
    inner = max((_loop_cost(child) for child in node.iter_child_nodes()), default=1)
    return _range_size(node.iter) * inner if isinstance(node, nodes.For) else inner


def _range_size(node: nodes.Node) -> int:
    """The length of `range(<constants>)` (capped like the sandbox), else 1."""
    if not (isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name)
            and node.node.name == "range" and node.args):
        return 1
    bounds = [value for a in node.args if isinstance(value := getattr(a, "value", None), int)]
    if len(bounds) != len(node.args):
        return 1
    try:
        return min(len(range(*bounds)), 100_000)
    except (TypeError, ValueError, OverflowError):
        return 1


def _exfil_problems(text: str) -> list[Problem]:
    for match in _REMOTE_URL.finditer(text):
        url = match.group(1) or match.group(2) or ""
        if CANARY in url.lower():
            return [(rules.TPL_EXFIL, Severity.high, f"writes the conversation into a URL to "
                     f"another host ({url.split(CANARY)[0][:60]}...): a chat UI that renders "
                     "it sends the conversation there")]
    return []


def injected_words(text: str, messages: list[dict[str, Any]]) -> set[str]:
    """The distinct words of a rendered conversation that neither the messages (content and
    role names) nor the markup wrote."""
    for message in messages:
        text = text.replace(str(message["content"]), " ")
    roles = {str(m["role"]).lower() for m in messages}
    return {w for w in _WORD.findall(_MARKUP.sub(" ", text)) if w.lower() not in roles}


def _injected_problems(text: str, messages: list[dict[str, Any]]) -> list[Problem]:
    words = injected_words(text, messages)
    if len(words) <= INJECTED_WORDS:
        return []
    return [(rules.TPL_INJECTED, Severity.medium, f"adds {len(words)} words of its own to a "
             f"conversation with a system message ({' '.join(sorted(words)[:10])}...) and is "
             "not a known published template: an instruction the user did not write")]
