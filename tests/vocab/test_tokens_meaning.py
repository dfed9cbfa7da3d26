"""Hugging Face token metadata that changes every answer without code (issue 46, part 2):
DG-TOKENS-MEANING on an end-of-generation id or a special added token that is ordinary text.

The benign side is the built-in pair and the real Qwen3 and Llama 3 vocabularies; each bad case
is one of them with one entry changed. The `tokenizers` library (what transformers and vLLM
tokenize with) is the oracle for the special token: it splits the word out of the input and
drops it from the decoded answer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from dflash_guard import rules
from dflash_guard.scan import scan_paths
from dflash_guard.scan.tokens import meaning_findings

pytestmark = pytest.mark.slow

TEXT = "the cat sat on the mat"


def copied(target: Path, out: Path) -> Path:
    folder = Path(shutil.copytree(target, out))
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)
    return folder


def test_the_real_and_built_in_pairs_are_quiet(vocab_pair, builtin_pair):
    _, target, drafter = vocab_pair
    for folder in (target, drafter, builtin_pair.target, builtin_pair.drafter):
        assert meaning_findings(folder) == [], folder


def test_an_eos_id_on_a_word_is_a_finding(vocab_pair, tmp_path):
    _, target, _ = vocab_pair
    folder = copied(target, tmp_path / "target")
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    config = json.loads((folder / "generation_config.json").read_text())
    config["eos_token_id"] = [*config.get("eos_token_id", []), vocab["Ġthe"]] if isinstance(
        config.get("eos_token_id"), list) else [config["eos_token_id"], vocab["Ġthe"]]
    (folder / "generation_config.json").write_text(json.dumps(config))
    [finding] = [f for f in scan_paths([folder]).findings
                 if f.rule_id == rules.TOKENS_MEANING.id]
    assert finding.file == "generation_config.json"
    assert f"eos_token_id {vocab['Ġthe']} is the ordinary token 'Ġthe'" in finding.message


def test_a_word_marked_special_is_a_finding_and_vanishes_from_answers(vocab_pair, tmp_path):
    _, target, _ = vocab_pair
    folder = copied(target, tmp_path / "target")
    document = json.loads((folder / "tokenizer.json").read_text())
    real = Tokenizer.from_str(json.dumps(document))
    assert real.decode(real.encode(TEXT).ids, skip_special_tokens=True) == TEXT
    document["added_tokens"].append({
        "id": document["model"]["vocab"]["the"], "content": "the", "single_word": False,
        "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    (folder / "tokenizer.json").write_text(json.dumps(document))
    planted = Tokenizer.from_file(str(folder / "tokenizer.json"))
    answer = planted.decode(planted.encode(TEXT).ids, skip_special_tokens=True)
    assert "the" not in answer and "cat" in answer  # the oracle: the word is gone
    [finding] = meaning_findings(folder)
    assert finding.rule_id == rules.TOKENS_MEANING.id and finding.file == "tokenizer.json"
    assert "'the'" in finding.message and "silently disappears" in finding.message
