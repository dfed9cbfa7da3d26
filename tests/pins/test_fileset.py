"""The engines' file sets (`pins.fileset`): what vLLM and llama.cpp open from a folder, by the
mirror of their rules (`tests/engine/test_fileset.py` holds the mirror to the pinned vLLM's own
functions and both to what the real engines open under strace)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from dflash_guard.pins.fileset import (
    FileSetError,
    NoWeights,
    approval_problems,
    fast_tokenizer_file,
    llamacpp_files,
    served_gguf,
    vllm_files,
    vllm_weights_mirror,
)
from kernels_ref.errors import RunnerError
from kernels_ref.weight_files import weight_files
from tests.support.layouts import locked, override, shard, write_gguf


@pytest.fixture
def target(builtin_pair, tmp_path) -> Path:
    return Path(shutil.copytree(builtin_pair.target, tmp_path / "target"))


def test_the_fixture_target_and_drafter_load_exactly_their_files(builtin_pair):
    """What the strace of a vLLM start found (../shared/docs/engine-confinement.md)."""
    target = vllm_files(builtin_pair.target)
    assert target.weights == ("model.safetensors",)
    assert target.loaded == ("config.json", "generation_config.json", "model.safetensors",
                             "tokenizer.json", "tokenizer_config.json")
    drafter = vllm_files(builtin_pair.drafter, tokenizer=False)
    assert drafter.loaded == ("config.json", "model.safetensors")
    assert drafter.not_loaded(locked(builtin_pair.drafter)) == ("dflash.py",)
    for role, folder in builtin_pair.roots.items():
        assert approval_problems(role, folder, locked(folder)) == []


def test_q2_a_second_safetensors_is_loaded_by_vllm_and_refused(target):
    override(target)
    assert vllm_weights_mirror(target) == ("model.safetensors", "zz-override.safetensors")
    with pytest.raises(RunnerError, match="ambiguous weight set: zz-override.safetensors"):
        weight_files(target)
    problems = approval_problems("target", target, locked(target))
    assert problems and "zz-override.safetensors" in problems[0]


def test_q2_benign_twin_shards_a_real_index_names_pass(target):
    shard(target)
    expected = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    assert vllm_weights_mirror(target) == expected
    assert tuple(weight_files(target)) == expected
    assert approval_problems("target", target, locked(target)) == []


def test_a_shard_no_index_names_is_filtered_by_vllm_and_refused_by_kernels_ref(target):
    override(target, "model-00003-of-00002.safetensors")
    shard(target)
    assert "model-00003-of-00002.safetensors" not in vllm_weights_mirror(target)
    problems = approval_problems("target", target, locked(target))
    assert problems and "model-00003-of-00002.safetensors" in problems[0]


def test_an_index_naming_a_missing_shard_is_a_folder_vllm_refuses(target):
    shard(target)
    (target / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileSetError, match="missing weight files"):
        vllm_weights_mirror(target)


def test_vllm_own_case_a_consolidated_file_switches_vllm_to_it(target):
    """Our case for vLLM: any `consolidated*.safetensors` in the tree makes vLLM's `auto`
    format `mistral`, which loads only the consolidated files: the diff test decodes
    `model.safetensors`, vLLM serves the other file."""
    override(target, "consolidated.safetensors")
    assert vllm_weights_mirror(target) == ("consolidated.safetensors",)
    problems = approval_problems("target", target, locked(target))
    assert len(problems) == 1
    assert "ambiguous weight set: consolidated.safetensors beside model.safetensors" in problems[0]


def test_weight_order_is_natural(tmp_path):
    for name in ("m-10.safetensors", "m-2.safetensors", "m-1.safetensors"):
        save_file({"x": torch.zeros(1)}, str(tmp_path / name))
    assert vllm_weights_mirror(tmp_path) == ("m-1.safetensors", "m-2.safetensors",
                                             "m-10.safetensors")


def test_bin_weights_are_used_only_without_safetensors(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    (tmp_path / "optimizer.pt").write_bytes(b"x")
    assert vllm_weights_mirror(tmp_path) == ("pytorch_model.bin",)
    (tmp_path / "pytorch_model.bin").unlink()
    (tmp_path / "optimizer.pt").unlink()
    with pytest.raises(NoWeights):
        vllm_weights_mirror(tmp_path)


def test_vllm_own_case_fast_tokenizer_files_reaches_into_the_unlocked_cache(target):
    """Our case for vLLM: transformers opens the `fast_tokenizer_files` entry for its version,
    here a file in `.cache/`, which the lock leaves out: refused, naming it."""
    config = json.loads((target / "tokenizer_config.json").read_text())
    config["fast_tokenizer_files"] = [".cache/tokenizer.4.0.0.json"]
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    (target / ".cache").mkdir()
    shutil.copy(target / "tokenizer.json", target / ".cache" / "tokenizer.4.0.0.json")
    files = vllm_files(target)
    assert ".cache/tokenizer.4.0.0.json" in files.loaded
    assert "tokenizer.json" not in files.loaded
    problems = approval_problems("target", target, locked(target))
    assert problems == [".cache/tokenizer.4.0.0.json".join(("target/", ": vLLM would open it "
                                                            "and the lock does not cover it"))]


def test_fast_tokenizer_files_outside_the_folder_is_refused(target):
    config = json.loads((target / "tokenizer_config.json").read_text())
    config["fast_tokenizer_files"] = ["../elsewhere/tokenizer.1.0.json"]
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    assert vllm_files(target).outside == ("../elsewhere/tokenizer.1.0.json",)
    assert "../elsewhere" in approval_problems("target", target, locked(target))[0]


@pytest.mark.parametrize(("files", "chosen"), [
    (["tokenizer.4.0.0.json"], "tokenizer.4.0.0.json"),
    (["tokenizer.99.0.json"], "tokenizer.json"),  # newer than transformers: not used
    (["tokenizer.4.0.json", "tokenizer.5.1.json", "tokenizer.6.0.json"], "tokenizer.5.1.json"),
    (["merges.txt"], "tokenizer.json"),
])
def test_fast_tokenizer_file_is_transformers_choice(files, chosen):
    assert fast_tokenizer_file(files) == chosen


def test_chat_templates_are_loaded_files(target):
    (target / "chat_template.jinja").write_text("{{ messages }}")
    (target / "additional_chat_templates").mkdir()
    (target / "additional_chat_templates" / "tool.jinja").write_text("{{ tools }}")
    loaded = vllm_files(target).loaded
    assert "chat_template.jinja" in loaded
    assert "additional_chat_templates/tool.jinja" in loaded


def test_processor_files_are_loaded_files(target):
    """vLLM 0.32 asks AutoProcessor for a chat template before the tokenizer's
    (`renderers/hf.py` `_try_get_processor_chat_template`): the processor's files are read, so
    the confined engine may read them and the scan judges them; the drafter's are not."""
    for name in ("processor_config.json", "preprocessor_config.json"):
        (target / name).write_text('{"chat_template": "{{ messages }}"}')
    assert {"processor_config.json", "preprocessor_config.json"} <= set(
        vllm_files(target).loaded)
    assert "processor_config.json" not in vllm_files(target, tokenizer=False).loaded


# --- llama.cpp -------------------------------------------------------------------------------


def test_a_single_gguf_is_its_only_file(tmp_path):
    assert llamacpp_files(write_gguf(tmp_path / "target.gguf")).weights == ("target.gguf",)


def test_a_split_gguf_loads_every_part(tmp_path):
    first = write_gguf(tmp_path / "m-00001-of-00003.gguf", (0, 3))
    assert llamacpp_files(first).weights == ("m-00001-of-00003.gguf", "m-00002-of-00003.gguf",
                                             "m-00003-of-00003.gguf")
    assert served_gguf(["m-00002-of-00003.gguf", "m-00001-of-00003.gguf",
                        "m-00003-of-00003.gguf"]) == "m-00001-of-00003.gguf"


def test_llamacpp_own_case_a_split_part_the_lock_does_not_cover_is_refused(tmp_path):
    """Our case for llama.cpp: the lock holds part 1 of a two-part split; llama.cpp would open
    part 2 too (whatever lands there later): refused, naming it."""
    write_gguf(tmp_path / "m-00001-of-00002.gguf", (0, 2))
    problems = approval_problems("target", tmp_path, {"m-00001-of-00002.gguf"})
    assert problems == ["target/m-00002-of-00002.gguf: llama.cpp would open it (a split part "
                        "of m-00001-of-00002.gguf) and the lock does not cover it"]
    write_gguf(tmp_path / "m-00002-of-00002.gguf", (1, 2))
    assert approval_problems("target", tmp_path, locked(tmp_path)) == []


def test_a_split_gguf_with_a_wrong_name_or_not_the_first_part_is_refused(tmp_path):
    with pytest.raises(FileSetError, match="invalid split file name"):
        llamacpp_files(write_gguf(tmp_path / "m.gguf", (0, 2)))
    with pytest.raises(FileSetError, match="first part only"):
        llamacpp_files(write_gguf(tmp_path / "m-00002-of-00002.gguf", (1, 2)))
