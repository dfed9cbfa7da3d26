"""A generation_config.json whose defaults change or cut every answer (issue 46, part 2):
DG-GENERATION-DEFAULTS.

The benign side is the published files of `tests/vectors/generation-config/` (Qwen3, Qwen2.5,
Llama 3.1, Gemma 2) and the built-in pair; each bad case is a crafted file. The oracle for what
the engine applies is the pinned vLLM itself: its field list is read back from its source, and
its transformers shows that each crafted value reaches the defaults vLLM applies.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from dflash_guard import rules
from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.pins.loaded import DeployEngine
from dflash_guard.pins.resolve import build_lock
from dflash_guard.scan import generation, scan_paths
from dflash_guard.severity import Severity
from tests.support import sglang, vllm
from tests.support.trust import copy_folder, write_lock, write_policy

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "generation-config"
PUBLISHED = sorted(VECTORS.glob("*.json"))
QWEN3 = VECTORS / "qwen3-8b.json"
RULE = rules.GENERATION_DEFAULTS.id

# (name, file text, severity, words the message holds)
BAD = [
    ("repetition-penalty", '{"repetition_penalty": 1.3}', Severity.high, "repetition_penalty 1.3"),
    ("presence-penalty", '{"presence_penalty": 1.5}', Severity.high, "presence_penalty 1.5"),
    ("frequency-penalty", '{"frequency_penalty": -0.5}', Severity.high, "frequency_penalty -0.5"),
    ("max-new-tokens", '{"max_new_tokens": 1}', Severity.high, "max_new_tokens 1"),
    ("top-k-off-catalog", '{"top_k": 1}', Severity.medium, "top_k 1"),
    ("a-string-number", '{"temperature": "0.6"}', Severity.high, 'temperature "0.6"'),
    ("nan", '{"top_p": NaN}', Severity.high, "top_p NaN"),
    ("a-float-top-k", '{"top_k": 20.0}', Severity.high, "top_k 20.0"),
    ("a-json-array", "[1, 2]", Severity.high, "not a JSON object"),
    ("a-huge-top-k", '{"top_k": 1' + "0" * 400 + "}", Severity.medium, "top_k 1000"),
    # the published Qwen3 file with one default changed is no longer the published file
    ("qwen3-with-a-penalty",
     QWEN3.read_text().replace('"top_k": 20,', '"top_k": 20,\n    "repetition_penalty": 1.3,'),
     Severity.high, "repetition_penalty 1.3"),
]


def _folder(tmp_path: Path, text: str, name: str = "generation_config.json") -> Path:
    folder = tmp_path / "model"
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "qwen3"}')
    (folder / name).write_text(text)
    return folder


def _found(folder: Path, **options) -> list:
    return [f for f in scan_paths([folder], **options).findings if f.rule_id == RULE]


@pytest.mark.parametrize(("name", "text", "severity", "words"), BAD, ids=[b[0] for b in BAD])
def test_each_crafted_file_is_a_finding(tmp_path, name, text, severity, words):
    found = _found(_folder(tmp_path, text))
    assert max(f.severity for f in found) is severity
    [finding] = [f for f in found if f.severity is severity]
    assert finding.file == "generation_config.json"
    assert words in finding.message, finding.message


@pytest.mark.parametrize("published", PUBLISHED, ids=lambda p: p.stem)
def test_the_published_files_are_quiet(tmp_path, published):
    """Qwen2.5's repetition_penalty 1.05 included: the published file is what its model
    was made with."""
    assert _found(_folder(tmp_path, published.read_text())) == []


def test_the_catalog_holds_each_vendored_published_file_with_a_source():
    catalog = generation.known_files()
    for published in PUBLISHED:
        document = json.loads(published.read_text())
        if any(name in document for name in generation.APPLIED):
            entry = catalog[generation.canonical_sha256(document)]
            assert entry["name"] and published.name in entry["source"]


def test_the_built_in_pair_is_quiet(builtin_pair):
    for folder in (builtin_pair.target, builtin_pair.drafter):
        assert generation.folder_findings(folder, "", frozenset()) == []


def test_a_reviewed_digest_clears_the_file_and_no_other(tmp_path):
    text = '{"repetition_penalty": 1.3}'
    folder = _folder(tmp_path, text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert _found(folder, reviewed_files=frozenset({digest})) == []
    other = hashlib.sha256(b"{}").hexdigest()
    assert len(_found(folder, reviewed_files=frozenset({other}))) == 1


def test_a_file_the_engine_does_not_read_is_not_judged(tmp_path):
    """vLLM reads the folder's own generation_config.json, never one in a subfolder; and a
    llama.cpp deploy reads none at all."""
    sub = _folder(tmp_path / "sub", '{"max_new_tokens": 1}', "nested/generation_config.json")
    assert _found(sub) == []
    top = _folder(tmp_path / "top", '{"max_new_tokens": 1}')
    (top / "model.gguf").write_bytes(b"GGUF")
    report = scan_paths([top], engines=(DeployEngine("llama.cpp", "llama.cpp"),))
    assert "generation_config.json" in report.not_loaded
    assert [f for f in report.findings if f.rule_id == RULE] == []


def test_config_json_max_new_tokens_counts_without_a_generation_config(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3", "max_new_tokens": 2}')
    [finding] = _found(folder)
    assert finding.file == "config.json" and "max_new_tokens 2" in finding.message


def _available_params(source: Path, function: str) -> tuple[str, ...]:
    """The `available_params = [...]` list of `function` in an engine's source file."""
    tree = ast.parse(source.read_text())
    method = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                  and node.name == function)
    [listed] = [ast.literal_eval(node.value) for node in ast.walk(method)
                if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "available_params"
                        for t in node.targets)]
    return tuple(listed)


def test_the_field_list_is_the_pinned_vllm_one():
    """A vLLM bump that changes the fields it applies fails here."""
    venv = vllm.install().parent.parent
    [source] = venv.glob("lib/python3*/site-packages/vllm/config/model.py")
    assert _available_params(source, "get_diff_sampling_param") == generation.APPLIED
    assert 'diff_sampling_param["max_tokens"] = diff_sampling_param.pop(' in source.read_text()


def test_the_pinned_sglang_applies_a_subset_of_the_fields():
    """SGLang (`--sampling-defaults model`, its default) applies fewer fields of the file
    (`ModelConfig.get_default_sampling_params`): each is judged here."""
    source = sglang.site_packages(sglang.install()) / "sglang/srt/configs/model_config.py"
    fields = _available_params(source, "get_default_sampling_params")
    assert fields and set(fields) <= set(generation.APPLIED)


@pytest.mark.slow  # a Python start importing transformers: seconds
def test_the_pinned_engine_carries_each_crafted_value(tmp_path):
    """The pinned vLLM's transformers reads each crafted file into the defaults vLLM applies
    (`to_diff_dict`, what `try_get_generation_config` returns); without a generation config,
    config.json's max_new_tokens."""
    folders = {}
    for name, text, _, _ in BAD:
        if name not in ("a-json-array",):
            folders[name] = _folder(tmp_path / name, text)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text('{"model_type": "qwen3", "max_new_tokens": 2}')
    script = (
        "import json, sys\n"
        "from transformers import AutoConfig, GenerationConfig\n"
        "out = {}\n"
        "for name, path in json.loads(sys.argv[1]).items():\n"
        "    out[name] = GenerationConfig.from_pretrained(path).to_diff_dict()\n"
        "config = AutoConfig.from_pretrained(sys.argv[2])\n"
        "out['bare'] = GenerationConfig.from_model_config(config).to_diff_dict()\n"
        "print(json.dumps(out, default=str))\n")
    done = subprocess.run(
        [str(vllm.install()), "-c", script, json.dumps({k: str(v) for k, v in folders.items()}),
         str(bare)], capture_output=True, text=True, timeout=300, check=True,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    carried = json.loads(done.stdout.strip().splitlines()[-1])
    assert carried["repetition-penalty"]["repetition_penalty"] == 1.3
    assert carried["presence-penalty"]["presence_penalty"] == 1.5
    assert carried["max-new-tokens"]["max_new_tokens"] == 1
    assert carried["top-k-off-catalog"]["top_k"] == 1
    assert carried["a-string-number"]["temperature"] == "0.6"
    assert carried["bare"]["max_new_tokens"] == 2


def _gate(tmp_path: Path, locked_pair, text: str, *replacements: tuple[str, str]):
    target = copy_folder(locked_pair.target, tmp_path / "target")
    (target / "generation_config.json").write_text(text)
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    lock = write_lock(build_lock({"target": str(target), "drafter": str(drafter)}).lock,
                      tmp_path / "dflash.lock")
    policy = write_policy(tmp_path / "policy", *replacements)
    roots = {"target": target, "drafter": drafter}
    return run_gate(GateOptions(lock, policy, roots, out=tmp_path / "approval.json"))


def test_the_gate_refuses_a_penalty_and_approves_it_once_reviewed(tmp_path, locked_pair):
    """The built-in target's own generation config with a penalty added."""
    config = json.loads((locked_pair.target / "generation_config.json").read_text())
    text = json.dumps({**config, "repetition_penalty": 1.3}, indent=2)
    result = _gate(tmp_path / "bad", locked_pair, text)
    assert not result.approved and result.checks[-1].name == "scan", result.reason
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert "repetition_penalty 1.3" in result.reason and digest in result.reason
    reviewed = ("reviewed_files: []\n",
                f"reviewed_files:\n  - {{sha256: {digest}, note: read by test@example.com}}\n")
    result = _gate(tmp_path / "reviewed", locked_pair, text, reviewed)
    assert result.approved, result.reason


def test_the_gate_approves_the_published_qwen3_file(tmp_path, locked_pair):
    result = _gate(tmp_path, locked_pair, QWEN3.read_text())
    assert result.approved, result.reason
