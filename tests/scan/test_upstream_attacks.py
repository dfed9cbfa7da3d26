"""Ways past the upstream comparison (issue 46 part 2), each with its benign twin from real
published files (tests/vectors/tokenizer-upstream/) or the built-in pair. transformers (the
library vLLM loads tokenizers, templates and generation defaults with) is the oracle for what
the engine reads; the scan must not be quiet where it reads something else than the upstream's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dflash_guard import fileio, rules
from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity

DIFF, NONE = rules.UPSTREAM_DIFF.id, rules.UPSTREAM_NONE.id
VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "tokenizer-upstream"
LLAMA = VECTORS / "meta-llama--Llama-3.1-8B-Instruct"
GPT_OSS = VECTORS / "openai--gpt-oss-20b"
# a published template of another model than the built-in pair's (the templates catalog's)
QWEN35_TEMPLATE = VECTORS / "Qwen--Qwen3.5-4B" / "chat_template.jinja"
NOTE = '"x_note": "\\ud800",\n  '  # a lone surrogate: JSON Python reads, with no UTF-8 form


def _found(report) -> list[tuple[str, Severity, str]]:
    return [(f.rule_id, f.severity, f.file) for f in report.findings
            if f.rule_id in (DIFF, NONE)]


def _with_note(path: Path, **changes: object) -> None:
    """Rewrite the JSON object at `path` with `changes` and a lone surrogate in a member of
    its own, as text (json.dumps cannot write one)."""
    document = {**json.loads(path.read_text(encoding="utf-8")), **changes}
    path.write_text("{\n  " + NOTE + json.dumps(document, indent=2)[4:], encoding="utf-8")


@pytest.fixture
def llama(tmp_path) -> Path:
    return Path(shutil.copytree(LLAMA, tmp_path / "llama"))


@pytest.fixture
def target(builtin_pair, tmp_path) -> Path:
    return Path(shutil.copytree(builtin_pair.target, tmp_path / "target"))


def test_escaped_text_is_the_published_file(llama):
    """Benign: the published file with every non-ASCII character (and none other) escaped is
    read as the same values: quiet against the catalog and the upstream."""
    config = llama / "tokenizer_config.json"
    config.write_text(json.dumps(json.loads(config.read_text(encoding="utf-8"))),
                      encoding="ascii")
    assert _found(scan_paths([llama])) == []
    assert _found(scan_paths([llama], upstream_folder=LLAMA)) == []


def test_a_lone_surrogate_does_not_hide_a_changed_file(llama, target, builtin_pair):
    """A `"\\ud800"` anywhere made the whole file skipped (its canonical JSON did not encode):
    a changed end-of-turn token passed with no finding against the catalog or the upstream."""
    _with_note(llama / "tokenizer_config.json", eos_token="<|end_of_text|>")
    assert json.loads((llama / "tokenizer_config.json").read_text())["x_note"] == "\ud800"
    assert _found(scan_paths([llama])) == [(NONE, Severity.medium, "tokenizer_config.json")]
    assert _found(scan_paths([llama], upstream_folder=LLAMA)) == [
        (DIFF, Severity.high, "tokenizer_config.json")]

    from transformers import AutoTokenizer  # the oracle: it loads the file, changed

    _with_note(target / "tokenizer_config.json", eos_token="<|bos|>")
    assert AutoTokenizer.from_pretrained(target).eos_token == "<|bos|>"
    assert _found(scan_paths([target], upstream_folder=builtin_pair.target)) == [
        (DIFF, Severity.high, "tokenizer_config.json")]


def test_a_file_that_cannot_be_read_is_not_quiet(llama, monkeypatch):
    """A compared file the scan cannot read (here: over its size limit) was skipped silently;
    the published file under the limit is quiet."""
    monkeypatch.setattr(fileio, "MAX_TEXT_BYTES", 1024)
    found = _found(scan_paths([llama], upstream_folder=LLAMA))
    assert (DIFF, Severity.high, "tokenizer_config.json") in found
    assert (NONE, Severity.medium, "tokenizer_config.json") in _found(scan_paths([llama]))
    monkeypatch.undo()
    assert _found(scan_paths([llama], upstream_folder=LLAMA)) == []


def test_without_a_generation_config_the_engine_reads_config_json(target, builtin_pair):
    """vLLM builds the generation defaults from config.json when the folder has no
    generation_config.json (`try_get_generation_config`): its stop ids among them. The
    upstream's file gone is HIGH, as is a folder in its place; the file kept is quiet."""
    from transformers import AutoConfig, GenerationConfig  # the oracle (what vLLM calls)

    assert _found(scan_paths([target], upstream_folder=builtin_pair.target)) == []
    (target / "generation_config.json").unlink()
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "eos_token_id": [257, 256]}))
    built = GenerationConfig.from_model_config(AutoConfig.from_pretrained(target))
    assert built.eos_token_id == [257, 256]
    found = _found(scan_paths([target], upstream_folder=builtin_pair.target))
    assert found == [(DIFF, Severity.high, "generation_config.json")]
    (target / "generation_config.json").mkdir()  # not a file: transformers reads config.json
    found = _found(scan_paths([target], upstream_folder=builtin_pair.target))
    assert found == [(DIFF, Severity.high, "generation_config.json")]


def test_named_templates_are_held_against_the_upstream(target, builtin_pair, tmp_path):
    """`additional_chat_templates/default.jinja` replaces the template transformers applies: a
    published template of another model there was no finding at all (the templates catalog
    knows it, and the comparison did not look). The upstream's own named template is quiet;
    one the upstream ships and the folder lacks is a default gone (MEDIUM)."""
    from transformers import AutoTokenizer

    named = target / "additional_chat_templates"
    named.mkdir()
    shutil.copyfile(QWEN35_TEMPLATE, named / "default.jinja")
    loaded = AutoTokenizer.from_pretrained(target).chat_template
    assert loaded == QWEN35_TEMPLATE.read_text(encoding="utf-8")  # the one applied
    found = _found(scan_paths([target], upstream_folder=builtin_pair.target))
    assert found == [(DIFF, Severity.high, "additional_chat_templates/default.jinja")]
    assert _found(scan_paths([target])) == []  # without upstream: the templates catalog's

    upstream = Path(shutil.copytree(target, tmp_path / "upstream"))
    assert _found(scan_paths([target], upstream_folder=upstream)) == []
    (named / "default.jinja").unlink()
    found = _found(scan_paths([target], upstream_folder=upstream))
    assert found == [(DIFF, Severity.medium, "additional_chat_templates/default.jinja")]


def test_published_files_of_different_models_do_not_vouch_together(llama):
    """Each published folder alone is quiet (`test_upstream`); gpt-oss's special tokens beside
    Llama's tokenizer config is a combination no publisher ships, and a published file under
    another file's name is not that file's."""
    shutil.copyfile(GPT_OSS / "special_tokens_map.json", llama / "special_tokens_map.json")
    [finding] = [f for f in scan_paths([llama]).findings if f.rule_id == NONE]
    assert finding.severity == Severity.medium
    assert "openai/gpt-oss-20b" in finding.message
    assert "meta-llama/Llama-3.1-8B-Instruct" in finding.message

    shutil.copyfile(LLAMA / "special_tokens_map.json", llama / "special_tokens_map.json")
    assert _found(scan_paths([llama])) == []
    shutil.copyfile(LLAMA / "special_tokens_map.json", llama / "added_tokens.json")
    assert _found(scan_paths([llama])) == [(NONE, Severity.medium, "added_tokens.json")]


def test_the_processor_template_is_held_against_the_upstream(target, builtin_pair, tmp_path):
    """vLLM 0.32 applies the AutoProcessor's chat template before the tokenizer's
    (`renderers/hf.py`), and a processor_config.json `chat_template` is the processor's: with a
    processor class named beside it, a published template of another model there replaced the
    compared ones with no finding. An upstream that ships the same file is quiet."""
    from transformers import AutoProcessor, ProcessorMixin

    template = QWEN35_TEMPLATE.read_text(encoding="utf-8")
    (target / "processor_config.json").write_text(json.dumps(
        {"processor_class": "LlavaProcessor", "chat_template": template}))
    (target / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "CLIPImageProcessor", "processor_class": "LlavaProcessor"}))
    processor = AutoProcessor.from_pretrained(target)
    assert isinstance(processor, ProcessorMixin) and processor.chat_template == template
    found = _found(scan_paths([target], upstream_folder=builtin_pair.target))
    assert found == [(DIFF, Severity.high, "processor_config.json")]
    assert _found(scan_paths([target])) == []  # without upstream: the templates catalog's

    upstream = Path(shutil.copytree(target, tmp_path / "upstream"))
    assert _found(scan_paths([target], upstream_folder=upstream)) == []


def test_a_lone_surrogate_in_a_generation_config_is_judged(target, builtin_pair):
    """The generation check hashed the same canonical JSON and crashed the scan (an internal
    error, no report); the file is judged like any other: its sampling default and its
    difference from the upstream's."""
    _with_note(target / "generation_config.json", temperature=0.01)
    found = {(f.rule_id, f.severity) for f in scan_paths(
        [target], upstream_folder=builtin_pair.target).findings
        if f.file == "generation_config.json"}
    assert found == {(DIFF, Severity.high),
                     (rules.GENERATION_DEFAULTS.id, Severity.medium)}
