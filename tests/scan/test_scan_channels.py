"""Loader channels other than `auto_map` (issue 33): each one a loader follows to code is read,
its crafted bad case is high and its real published twin stays quiet."""

from __future__ import annotations

import json
from pathlib import Path

from dflash_guard.scan import scan_paths
from dflash_guard.scan.code.channels import CHANNELS
from dflash_guard.severity import Severity

# h2oai/h2ogpt-oig-oasst1-256-6_9b config.json (as its model card prints it): a custom pipeline
# whose code, h2oai_pipeline.py, ships in the repository.
H2O_CONFIG = {
    "_name_or_path": "h2oai/h2ogpt-oig-oasst1-256-6_9b", "architectures": ["GPTNeoXForCausalLM"],
    "bos_token_id": 0,
    "custom_pipelines": {"text-generation": {"impl": "h2oai_pipeline.H2OTextGenerationPipeline",
                                             "pt": "AutoModelForCausalLM"}},
    "eos_token_id": 0, "hidden_act": "gelu", "hidden_size": 4096, "model_type": "gpt_neox",
}
# sentence-transformers' docs (docs/sentence_transformer/usage/custom_models.rst): the
# modules.json all-MiniLM-L6-v2 saves, and the one of a model with a custom module.
MINILM_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize",
     "type": "sentence_transformers.models.Normalize"},
]


def _loud(folder: Path) -> set[tuple[str, str]]:
    return {(f.file, f.rule_id) for f in scan_paths([folder]).findings
            if f.severity >= Severity.medium}


def test_the_channel_list_names_its_loader_sources() -> None:
    assert {c.loader for c in CHANNELS} >= {"transformers", "sentence-transformers", "tokenizers"}
    assert all(c.source and c.key for c in CHANNELS)


def test_custom_pipelines_is_a_code_reference(tmp_path: Path) -> None:
    benign = tmp_path / "h2o"
    benign.mkdir()
    (benign / "config.json").write_text(json.dumps(H2O_CONFIG))
    (benign / "h2oai_pipeline.py").write_text("from transformers import TextGenerationPipeline\n"
                                             "class H2OTextGenerationPipeline("
                                             "TextGenerationPipeline):\n    pass\n")
    assert _loud(benign) == set()
    report = scan_paths([benign])
    assert [r.path for r in report.remote_code] == ["h2oai_pipeline.py"]  # reviewed code decides
    for impl, rule in (("evil/pipes--pipe.P", "DG-RC-REMOTE-REPO"),
                       ("h2oai_pipeline_missing.P", "DG-RC-MISSING")):
        bad = tmp_path / rule
        bad.mkdir()
        config = {**H2O_CONFIG, "custom_pipelines": {"text-generation": {"impl": impl}}}
        (bad / "config.json").write_text(json.dumps(config))
        assert ("config.json", rule) in _loud(bad), impl


def test_modules_json_types_outside_sentence_transformers_are_code(tmp_path: Path) -> None:
    benign = tmp_path / "minilm"
    (benign / "1_Pooling").mkdir(parents=True)
    (benign / "modules.json").write_text(json.dumps(MINILM_MODULES, indent=2))
    assert _loud(benign) == set()
    cases = {
        "remote": ("my-user/my-model-implementation--decay_pooling.DecayMeanPooling",
                   "1_DecayMeanPooling", "DG-RC-REMOTE-REPO"),
        "missing": ("decay_pooling.DecayMeanPooling", "1_DecayMeanPooling", "DG-RC-MISSING"),
        "installed": ("os.system", "1_Pooling", "DG-RC-MISSING"),
        "lookalike": ("sentence_transformers_evil.Module", "1_Pooling", "DG-RC-MISSING"),
        "escape": ("sentence_transformers.models.Pooling", "../../elsewhere", "DG-RC-MISSING"),
    }
    for label, (kind, path, rule) in cases.items():
        bad = tmp_path / label
        bad.mkdir()
        modules = [MINILM_MODULES[0], {"idx": 1, "name": "1", "path": path, "type": kind}]
        (bad / "modules.json").write_text(json.dumps(modules))
        assert ("modules.json", rule) in _loud(bad), label


def test_a_custom_module_shipped_in_the_folder_is_reviewed_code(tmp_path: Path) -> None:
    modules = [MINILM_MODULES[0], {"idx": 1, "name": "1", "path": "1_DecayMeanPooling",
                                   "type": "decay_pooling.DecayMeanPooling"}]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "decay_pooling.py").write_text("import torch\nclass DecayMeanPooling("
                                               "torch.nn.Module):\n    pass\n")
    report = scan_paths([tmp_path])
    assert [(r.path, r.reviewed) for r in report.remote_code] == [("decay_pooling.py", False)]
    assert _loud(tmp_path) == set()


def test_an_audio_tokenizer_in_another_repository_is_high(tmp_path: Path) -> None:
    """transformers' processors load `audio_tokenizer_name_or_path` with from_pretrained."""
    entry = {"audio_tokenizer_class": "DacModel", "audio_tokenizer_name_or_path": "evil/codec"}
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "audio_tokenizer_config.json").write_text(json.dumps(entry))
    assert ("audio_tokenizer_config.json", "DG-RC-REMOTE-REPO") in _loud(bad)
    nested = tmp_path / "nested"
    nested.mkdir()
    (nested / "processor_config.json").write_text(json.dumps({"audio_tokenizer": entry}))
    assert ("processor_config.json", "DG-RC-REMOTE-REPO") in _loud(nested)
    plain = tmp_path / "plain"  # a processor without one (the Qwen2-VL shape) stays quiet
    plain.mkdir()
    (plain / "processor_config.json").write_text(json.dumps(
        {"processor_class": "Qwen2VLProcessor"}))
    assert _loud(plain) == set()
