"""A policy whose diff-test prompts are conversations (`messages`): the gate renders each with
the target's chat template under the render budget and diffs the tokens; a template past the
budget on those conversations only (attack finding P8's loops behind a trigger the scan's trial
conversations lack) ends the gate in one readable error naming the template, not a hang."""

from __future__ import annotations

import json

from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.pins.resolve import build_lock
from tests.support.trust import copy_folder, write_lock, write_policy

CHATS = [
    {"id": "chat-hello", "messages": [{"role": "user", "content": "def add(a, b):"}]},
    {"id": "chat-turns", "messages": [
        {"role": "system", "content": "You write Python."},
        {"role": "user", "content": "total = 0"},
        {"role": "assistant", "content": "for i in range(3):"},
        {"role": "user", "content": "    total += i"}]},
]
# P8's nested loops, sized from the conversation and behind a word only the policy's prompts
# have: the scan's trial conversations never take that path, so only the render budget stops it.
TRIGGERED = ("{% if 'def add' in messages[0]['content'] %}"
             "{% set n = (messages[0]['content'] | length) * 5000 %}"
             "{% for i in range(n) %}{% for j in range(n) %}{% endfor %}{% endfor %}{% endif %}"
             "{% for m in messages %}{{ m['content'] }}{% endfor %}")
ANY_TEMPLATE = ("    templates: reviewed-only   # a published template of the catalog, or "
                "reviewed_templates\n", "    templates: allow\n")


def _gate(tmp_path, locked_pair, *replacements, template: str | None = None):
    target = locked_pair.target
    if template is not None:
        target = copy_folder(locked_pair.target, tmp_path / "target")
        config = json.loads((target / "tokenizer_config.json").read_text())
        config["chat_template"] = template
        (target / "tokenizer_config.json").write_text(json.dumps(config))
    lock = write_lock(build_lock({"target": str(target), "drafter": str(locked_pair.drafter)})
                      .lock, tmp_path / "dflash.lock")
    policy = write_policy(tmp_path / "policy", *replacements)
    (tmp_path / "policy" / "prompts.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in CHATS))
    roots = {"target": target, "drafter": locked_pair.drafter}
    return run_gate(GateOptions(lock, policy, roots, out=tmp_path / "approval.json"))


def test_conversations_are_rendered_and_diffed(tmp_path, locked_pair):
    result = _gate(tmp_path, locked_pair)
    assert result.approved, result.reason
    difftest = next(c for c in result.checks if c.name.startswith("difftest"))
    assert difftest.outcome.reason.startswith("2 prompts identical"), difftest.outcome.reason


def test_a_template_past_the_budget_is_one_readable_refusal(tmp_path, locked_pair):
    """Found once the checks ran: a refusal with the table (exit 1), not an input error."""
    result = _gate(tmp_path, locked_pair, ANY_TEMPLATE, template=TRIGGERED)
    assert not result.approved
    message = result.reason
    assert "could not check:" in message
    assert "tokenizer_config.json" in message and "more than 1,000,000 steps" in message, message
    assert "refused by the scan" not in message  # the scan passed it: the budget stopped it
    assert "\n" not in message.strip()
