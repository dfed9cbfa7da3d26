"""The loader channels: each file and config key a pinned loader follows to code, another
repository or compiled content, kept as data with where in the loader's source it is read, so a
loader upgrade is a reviewed diff of this table.

`code_references` gives, for one config file, every class reference (`module.Class` or
`org/repo--module.Class`) a loader would import; the runner sends each through the remote-code
boundary (the module's file must be in the folder and is then reviewed code; another repository
is a finding). Regexes in `tokenizer.json` are checked by `tokenizer_regex`.
"""

from __future__ import annotations

import dataclasses
import re

from dflash_guard.scan.code.remote_code import auto_map_targets

# Every config file transformers reads an `auto_map` from (in any folder of the walk).
AUTO_MAP_CONFIGS = frozenset(
    {"config.json", "tokenizer_config.json", "processor_config.json",
     "preprocessor_config.json", "image_processor_config.json", "feature_extractor_config.json",
     "video_preprocessor_config.json"}
)
# sentence-transformers imports a type in its own package directly; any other is code to load.
_ST_OWN = re.compile(r"sentence_transformers(\.[A-Za-z_][A-Za-z0-9_]*)+")


@dataclasses.dataclass(frozen=True)
class Channel:
    """One place a loader turns a file's content into code or compiled work."""

    loader: str
    files: frozenset[str]
    key: str
    leads_to: str
    source: str  # where the pinned loader reads it


CHANNELS = (
    Channel("transformers", AUTO_MAP_CONFIGS, "auto_map", "code (dynamic module)",
            "transformers/dynamic_module_utils.py get_class_from_dynamic_module, called from "
            "models/auto/{configuration,auto_factory,tokenization,processing,"
            "image_processing,feature_extraction,video_processing}_auto.py"),
    Channel("transformers", frozenset({"config.json"}), "custom_pipelines.*.impl",
            "code (dynamic module)",
            "transformers/pipelines/__init__.py pipeline(): config.custom_pipelines[task]"
            "['impl'] to get_class_from_dynamic_module"),
    Channel("transformers", frozenset(), "custom_generate/generate.py", "code",
            "transformers/generation/utils.py load_custom_generate (a .py file: reviewed code "
            "like every other)"),
    Channel("peft", frozenset({"adapter_config.json"}), "auto_mapping.parent_library",
            "an installed module imported by name", "peft/auto.py AutoPeftModel.from_pretrained"),
    Channel("sentence-transformers", frozenset({"modules.json"}), "[*].type",
            "code (dynamic module, or an installed module imported by name); [*].path: the "
            "module's folder",
            "sentence_transformers/SentenceTransformer.py _load_sbert_model and "
            "_load_module_class_from_ref: a type outside sentence_transformers goes to "
            "get_class_from_dynamic_module (for any local folder), then import_from_string"),
    Channel("transformers", frozenset({"audio_tokenizer_config.json", "processor_config.json"}),
            "audio_tokenizer.audio_tokenizer_name_or_path", "another repository (from_pretrained)",
            "transformers/processing_utils.py ProcessorMixin.get_processor_dict: "
            "audio_tokenizer_class.from_pretrained(audio_tokenizer_name_or_path)"),
    Channel("tokenizers", frozenset({"tokenizer.json"}),
            "normalizer / pre_tokenizer (nested Sequence) pattern.Regex",
            "a regex compiled at load and run on every request",
            "tokenizers/src/utils/... SysRegex (onig) built by Tokenizer.from_file"),
    Channel("onnx / onnxruntime", frozenset({"*.onnx"}), "TensorProto.external_data location",
            "another file read as tensor bytes (checked by scan/weights/onnx.py)",
            "onnx/checker.cc resolve_external_data_location; onnxruntime/core/framework/"
            "tensorprotoutils.cc ValidateExternalDataPathFromDir, GetExternalDataInfo"),
)


def code_references(name: str, config: object) -> list[tuple[str, str]]:
    """`(key, class reference)` for every code reference the loaders read from the config file
    `name` holds (`config`, parsed JSON)."""
    refs: list[tuple[str, str]] = []
    if name in AUTO_MAP_CONFIGS or name == "adapter_config.json":
        refs += [("auto_map", target) for target in auto_map_targets(config)]
    if name == "config.json" and isinstance(config, dict):
        pipelines = config.get("custom_pipelines")
        if isinstance(pipelines, dict):
            for task in pipelines.values():
                impl = task.get("impl") if isinstance(task, dict) else None
                refs.append(("custom_pipelines", impl if isinstance(impl, str) else repr(impl)))
        elif pipelines not in (None, {}):
            refs.append(("custom_pipelines", repr(pipelines)[:80]))
    if name == "modules.json":
        modules = config if isinstance(config, list) else [config]
        for module in modules:
            kind = module.get("type") if isinstance(module, dict) else None
            if not (isinstance(kind, str) and _ST_OWN.fullmatch(kind)):
                refs.append(("modules.json type", kind if isinstance(kind, str) else repr(kind)))
    return refs


def repository_references(name: str, config: object) -> list[tuple[str, str]]:
    """`(key, repository or path)` for every other model a loader reads from this config."""
    if not isinstance(config, dict):
        return []
    if name == "audio_tokenizer_config.json":
        entry: object = config
    elif name == "processor_config.json":
        entry = config.get("audio_tokenizer")
    else:
        return []
    target = entry.get("audio_tokenizer_name_or_path") if isinstance(entry, dict) else None
    if target is None:
        return []
    return [("audio_tokenizer_name_or_path", target if isinstance(target, str) else repr(target))]


def module_paths(config: object) -> list[str]:
    """The `path` of every module a `modules.json` names (sentence-transformers loads each
    module from that folder)."""
    modules = config if isinstance(config, list) else []
    return [m["path"] for m in modules if isinstance(m, dict) and isinstance(m.get("path"), str)]
