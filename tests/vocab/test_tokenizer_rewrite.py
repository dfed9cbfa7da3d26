"""A tokenizer pipeline that rewrites ordinary text (issue 46, part 2): DG-TOKENIZER-REWRITE,
judged by the real `tokenizers` library in the regex check's bounded child.

The benign side is the built-in pair and the real Qwen3 and Llama 3 tokenizers, which give back
the check's texts and every test string llama.cpp keeps for their vocabularies (whitespace runs,
tabs, emoji, CJK, code: `models/ggml-vocab-*.gguf.inp`). Each bad case is one of them with one
pipeline step added, as an attacker would plant it, and no code.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from dflash_guard import rules
from dflash_guard.scan import scan_paths
from dflash_guard.scan.code.tokenizer_regex import check_tokenizer_json

pytestmark = pytest.mark.slow

VECTORS = {"qwen3": "qwen2", "llama3": "llama-bpe"}  # the pinned tree's name for each vocabulary
SEPARATOR = "\n__ggml_vocab_test__\n"


def rewrites(path: Path) -> list[str]:
    return [f.message for f in check_tokenizer_json(path, path.name)
            if f.rule_id == rules.TOKENIZER_REWRITE.id]


def test_the_real_and_built_in_tokenizers_give_text_back(vocab_pair, builtin_pair, tree):
    name, target, _ = vocab_pair
    for folder in (target, builtin_pair.target):
        assert rewrites(folder / "tokenizer.json") == [], folder
    tokenizer = Tokenizer.from_file(str(target / "tokenizer.json"))
    inputs = (tree / "models" / f"ggml-vocab-{VECTORS[name]}.gguf.inp").read_text()
    texts = [text for text in inputs.split(SEPARATOR) if text]
    assert len(texts) > 40
    for text in texts:  # the premise of the check, on llama.cpp's own test strings
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert tokenizer.decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize(("step", "value"), [
    ("normalizer", {"type": "Replace", "pattern": {"String": "yes"}, "content": "no"}),
    ("normalizer", {"type": "Lowercase"}),
    ("decoder", {"type": "Replace", "pattern": {"String": "true"}, "content": "false"}),
])
def test_a_pipeline_step_that_rewrites_text_is_a_finding(vocab_pair, tmp_path, step, value):
    _, target, _ = vocab_pair
    folder = Path(shutil.copytree(target, tmp_path / "target"))
    folder.chmod(0o755)
    path = folder / "tokenizer.json"
    path.chmod(0o644)
    document = json.loads(path.read_text())
    present = document.get(step)
    document[step] = value if present is None else {
        "type": "Sequence", ("normalizers" if step == "normalizer" else "decoders"): [
            present, value] if step == "decoder" else [value, present]}
    path.write_text(json.dumps(document))
    [finding] = [f for f in scan_paths([folder]).findings
                 if f.rule_id == rules.TOKENIZER_REWRITE.id]
    assert finding.file == "tokenizer.json"
    assert "its pipeline rewrites ordinary text" in finding.message
