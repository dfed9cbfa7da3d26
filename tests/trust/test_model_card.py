"""Issue 25 (new-user item): the drafter's model card, read with huggingface_hub's `ModelCard`,
checked against the policy's `model_card` rules, and enforced by the gate."""

from __future__ import annotations

import pytest

from dflash_guard.errors import InputError
from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.trust.model_card import ModelCardRules, card_problems, read_card
from dflash_guard.trust.policy import load_policy
from tests.support.trust import write_lock, write_policy

TARGET = "Qwen/Qwen3-8B"
GOOD = f"---\nlicense: apache-2.0\nbase_model: {TARGET}\ndatasets: [org/chat-data]\n---\n# card\n"
ALL = ModelCardRules(base_model_is_target=True, licenses=("apache-2.0", "mit"),
                     datasets_required=True)


def _card(tmp_path, text):
    (tmp_path / "README.md").write_text(text)
    return tmp_path


def test_a_card_that_names_the_target_an_allowed_license_and_its_data_passes(tmp_path):
    folder = _card(tmp_path, GOOD)
    assert read_card(folder).datasets == ("org/chat-data",)
    assert card_problems(folder, ALL, TARGET) == []


@pytest.mark.parametrize(("text", "problem"), [
    (GOOD.replace(TARGET, "Other/Model"), "not the locked target"),
    (GOOD.replace("apache-2.0", "cc-by-nc-4.0"), "license 'cc-by-nc-4.0' is not one of"),
    (GOOD.replace("datasets: [org/chat-data]\n", ""), "names no training datasets"),
    ("# a card without front matter\n", "not the locked target"),
])
def test_each_rule_refuses_its_own_claim(tmp_path, text, problem):
    assert any(problem in p for p in card_problems(_card(tmp_path, text), ALL, TARGET))


def test_no_card_breaks_every_rule_set_and_no_rule_needs_no_card(tmp_path):
    assert "no model card" in card_problems(tmp_path, ALL, TARGET)[0]
    assert card_problems(tmp_path, ModelCardRules(), TARGET) == []
    assert "local folder" in card_problems(_card(tmp_path, GOOD), ALL, None)[0]


@pytest.mark.parametrize("text", [
    "---\na: &x [1, 2]\nb: *x\n---\n",  # an alias: the bomb's building block
    "---\nlicense: !!python/object/apply:os.system ['true']\n---\n",
    "---\nlicense: [\n---\n",
])
def test_a_hostile_front_matter_is_one_readable_error(tmp_path, text):
    with pytest.raises(InputError):
        read_card(_card(tmp_path, text))


def test_the_policy_section_is_read_and_the_gate_enforces_it(locked_pair, tmp_path):
    rules = "model_card:\n  base_model: target\n  licenses: [apache-2.0]\n  datasets: required\n"
    policy = write_policy(tmp_path / "p", ("waivers: []\n", "waivers: []\n" + rules))
    assert load_policy(policy).model_card == ModelCardRules(True, ("apache-2.0",), True)
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = run_gate(GateOptions(lock, policy, locked_pair.roots))
    assert not result.approved and result.checks[-1].name == "policy"
    assert "drafter no model card" in result.reason
