"""Chat templates are code: a template that is neither a published one of the catalog nor on
the policy's `reviewed_templates` is refused by the gate where the tier says
`templates: reviewed-only`, and accepted once its sha256 is reviewed; a reviewed digest of
another template does not help; `dflash-guard review` offers it and writes the entry."""

from __future__ import annotations

import hashlib

import pytest

from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.trust.policy import BUILTIN_POLICIES, Templates, load_policy
from tests.support.trust import copy_folder, relock, write_lock, write_policy

# A template of its own (inside the grammar, cheap, nothing injected): the scan's only note
# about it is that nobody reviewed it.
TEMPLATE = ("{% for message in messages %}<|bos|>{{ message['role'] }}: "
            "{{ message['content'] }}\n{% endfor %}")
DIGEST = hashlib.sha256(TEMPLATE.encode()).hexdigest()
OTHER = hashlib.sha256((TEMPLATE + " ").encode()).hexdigest()
OFFICIAL = ("    templates: reviewed-only   # a published template of the catalog, or "
            "reviewed_templates\n")


def _reviewed(*digests: str) -> tuple[str, str]:
    entries = "".join(f"  - {{sha256: {d}, note: read by test@example.com}}\n" for d in digests)
    return "reviewed_templates: []\n", f"reviewed_templates:\n{entries}"


def _gate(tmp_path, locked_pair, *replacements: tuple[str, str]):
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    (drafter / "chat_template.jinja").write_text(TEMPLATE)
    lock = write_lock(relock(locked_pair, drafter), tmp_path / "dflash.lock")
    policy = write_policy(tmp_path / "policy", *replacements)
    roots = {"target": locked_pair.target, "drafter": drafter}
    return run_gate(GateOptions(lock, policy, roots, out=tmp_path / "approval.json"))


def test_an_unreviewed_template_is_refused_at_the_scan_step(tmp_path, locked_pair):
    result = _gate(tmp_path, locked_pair)
    assert not result.approved and result.checks[-1].name == "scan", result.reason
    assert "drafter/chat_template.jinja: unreviewed chat template" in result.reason
    assert DIGEST in result.reason and "reviewed_templates" in result.reason


def test_a_reviewed_template_passes(tmp_path, locked_pair):
    result = _gate(tmp_path, locked_pair, _reviewed(DIGEST))
    assert result.approved, result.reason


def test_the_digest_of_another_template_does_not_help(tmp_path, locked_pair):
    result = _gate(tmp_path, locked_pair, _reviewed(OTHER))
    assert not result.approved and DIGEST in result.reason


def test_a_tier_that_allows_templates_passes_it(tmp_path, locked_pair):
    """The local folder's tier (official under default) set to `templates: allow`."""
    result = _gate(tmp_path, locked_pair, (OFFICIAL, "    templates: allow\n"))
    assert result.approved, result.reason


@pytest.mark.parametrize("name", BUILTIN_POLICIES)
def test_built_in_tiers(name):
    """default and strict want every template published or reviewed; dev allows any that
    passes the scan."""
    policy = load_policy(name)
    wanted = Templates.allow if name == "dev" else Templates.reviewed_only
    assert {rule.templates for rule in policy.tiers.values()} == {wanted}
    assert policy.reviewed_templates == ()


def test_review_offers_the_template_and_writes_the_entry(cli, tmp_path, locked_pair):
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    (drafter / "chat_template.jinja").write_text(TEMPLATE)
    lock = write_lock(relock(locked_pair, drafter), tmp_path / "dflash.lock")
    roots = ["--root", f"target={locked_pair.target}", "--root", f"drafter={drafter}"]
    shown = cli("review", "--lock", lock, *roots, "-q")
    assert shown.exit_code == 1
    text = " ".join(shown.stdout.split())
    assert f"drafter/chat_template.jinja chat template sha256 {DIGEST}" in text
    assert "1 chat template" in text
    written = tmp_path / "reviewed.yaml"
    assert cli("review", "--lock", lock, *roots, "--reviewer", "me@example.com", "-o", written,
               "-q").exit_code == 0
    policy = load_policy(written)
    assert policy.reviewed_template_sha256 == {DIGEST}
    assert "drafter/chat_template.jinja, reviewed by me@example.com" in (
        policy.reviewed_templates[0].note)
