"""Loading HF-style folders: real parameter names, shards, refusals with a clear message."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from kernels_ref.drafter import Drafter, DrafterConfig
from kernels_ref.errors import RunnerError
from kernels_ref.fixtures import make_fixture_pair
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.model import ModelConfig, Target
from tests.support.kernels import random_pair

HF_TARGET_NAMES = {
    "model.embed_tokens.weight",
    "model.norm.weight",
    "lm_head.weight",
    *(
        f"model.layers.{n}.{part}.weight"
        for n in range(3)
        for part in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "self_attn.q_norm",
            "self_attn.k_norm",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
            "input_layernorm",
            "post_attention_layernorm",
        )
    ),
}


def tensor_names(path: Path) -> set[str]:
    with safe_open(str(path), framework="pt") as handle:
        return set(handle.keys())


def edit_config(folder: Path, **changes: object) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if key in ("mask_token_id", "target_layer_ids", "final_logit_softcapping"):
            config["dflash_config"][key] = value
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def test_round_trip_uses_hf_parameter_names(tmp_path: Path) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, seed=3)
    assert tensor_names(target_dir / "model.safetensors") == HF_TARGET_NAMES
    drafter_names = tensor_names(drafter_dir / "model.safetensors")
    assert {"fc.weight", "hidden_norm.weight", "norm.weight"} <= drafter_names
    assert all(n.startswith(("fc.", "hidden_norm.", "norm.", "layers.")) for n in drafter_names)
    target = load_target(target_dir)
    stored = load_file(str(target_dir / "model.safetensors"))
    for name, tensor in target.state_dict().items():
        assert torch.equal(tensor, stored[name]), name


def test_tied_target_has_no_lm_head_and_uses_the_embedding(tmp_path: Path) -> None:
    target_dir, _ = random_pair(tmp_path, seed=4, tie=True)
    assert "lm_head.weight" not in tensor_names(target_dir / "model.safetensors")
    target = load_target(target_dir)
    hidden = torch.randn(1, 2, 32)
    assert torch.equal(target.head(hidden), hidden @ target.model.embed_tokens.weight.T)


def test_sharded_checkpoint_loads_to_the_same_outputs(tmp_path: Path) -> None:
    target_dir, drafter_dir = random_pair(tmp_path / "single", seed=5)
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    tensors = load_file(str(target_dir / "model.safetensors"))
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    weight_map = {}
    for shard, members in shards.items():
        save_file({n: tensors[n] for n in members}, str(sharded / shard))
        weight_map.update({n: shard for n in members})
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    (sharded / "config.json").write_bytes((target_dir / "config.json").read_bytes())
    one, two = load_target(target_dir), load_target(sharded)
    drafter = load_drafter(drafter_dir, two)
    prompt = [10, 20, 30]
    assert (
        generate(one, None, prompt, max_new_tokens=12, stop_ids=set()).tokens
        == generate(two, drafter, prompt, max_new_tokens=12, stop_ids=set()).tokens
    )


def test_shard_missing_a_mapped_tensor_is_refused(tmp_path: Path) -> None:
    target_dir, _ = random_pair(tmp_path, seed=5)
    tensors = load_file(str(target_dir / "model.safetensors"))
    save_file(
        {k: v for k, v in tensors.items() if k != "model.norm.weight"},
        str(target_dir / "shard.safetensors"),
    )
    (target_dir / "model.safetensors").unlink()  # beside the index, it would be ambiguous
    (target_dir / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": dict.fromkeys(tensors, "shard.safetensors")})
    )
    with pytest.raises(RunnerError, match="model.norm.weight"):
        load_target(target_dir)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hidden_size": 48}, "hidden_size 48"),
        ({"vocab_size": 300}, "vocab_size 300"),
        ({"num_target_layers": 5}, "num_target_layers 5"),
        ({"target_layer_ids": [0, 3]}, r"target_layer_ids \[3\] out of range"),
        ({"mask_token_id": 999}, "mask_token_id 999"),
    ],
)
def test_mismatched_drafter_is_refused(tmp_path: Path, changes: dict, message: str) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, seed=6)
    edit_config(drafter_dir, **changes)
    target = load_target(target_dir)
    with pytest.raises(RunnerError, match=f"does not match its target.*{message}"):
        load_drafter(drafter_dir, target)


@pytest.mark.parametrize(
    "changes",
    [
        {"is_causal": True},
        {"layer_types": ["sliding_attention"]},
        {"final_logit_softcapping": 30.0},
    ],
)
def test_unsupported_drafter_variants_are_refused(tmp_path: Path, changes: dict) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, seed=6)
    edit_config(drafter_dir, **changes)
    with pytest.raises(RunnerError, match="not supported by kernels_ref"):
        load_drafter(drafter_dir, load_target(target_dir))


def test_missing_and_misshapen_tensors_are_named(tmp_path: Path) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, seed=7)
    target = load_target(target_dir)
    tensors = load_file(str(drafter_dir / "model.safetensors"))
    save_file(
        {k: v for k, v in tensors.items() if k != "layers.0.mlp.up_proj.weight"},
        str(drafter_dir / "model.safetensors"),
    )
    with pytest.raises(RunnerError, match="missing tensor 'layers.0.mlp.up_proj.weight'"):
        load_drafter(drafter_dir, target)
    tensors["fc.weight"] = torch.zeros(32, 32)
    save_file(tensors, str(drafter_dir / "model.safetensors"))
    with pytest.raises(RunnerError, match=r"'fc.weight' has shape \(32, 32\)"):
        load_drafter(drafter_dir, target)


def forbid_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the loader may build its modules on the meta device only (no memory)."""
    import kernels_ref.load as load

    def guarded(kind: type) -> object:
        def build(*args: object) -> object:
            if torch.get_default_device().type != "meta":
                raise AssertionError(f"{kind.__name__} allocated before the shapes were checked")
            return kind(*args)

        return build

    for name in ("Target", "Drafter", "Drafter2"):
        if hasattr(load, name):
            monkeypatch.setattr(load, name, guarded(getattr(load, name)))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vocab_size", 50_000_000),  # N25: 12.8 GB allocated from config.json alone
        ("hidden_size", 1 << 20),
        ("num_hidden_layers", 100_000),
        ("max_position_embeddings", 1 << 30),
        ("intermediate_size", 1 << 24),
    ],
)
def test_config_sizes_are_bounded_before_they_size_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: int
) -> None:
    target_dir, _ = random_pair(tmp_path, seed=8)
    edit_config(target_dir, **{field: value})
    forbid_building(monkeypatch)
    with pytest.raises(RunnerError, match=rf"'{field}' is {value}, above kernels_ref's limit"):
        load_target(target_dir)


def test_header_shapes_are_checked_before_any_module_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target_dir, drafter_dir = random_pair(tmp_path, seed=8)
    target = load_target(target_dir)
    edit_config(target_dir, vocab_size=100_000)  # under the bound, not what the weights hold
    edit_config(drafter_dir, intermediate_size=4096)
    forbid_building(monkeypatch)
    with pytest.raises(
        RunnerError,
        match=r"'model.embed_tokens.weight' has shape \(264, 32\), the config implies "
        r"\(100000, 32\)",
    ):
        load_target(target_dir)
    with pytest.raises(RunnerError, match=r"'layers.0.mlp.gate_proj.weight' has shape \(64, 32\)"):
        load_drafter(drafter_dir, target)
    edit_config(drafter_dir, intermediate_size=64, block_size=1 << 20)
    with pytest.raises(RunnerError, match="'block_size' is 1048576, above"):
        load_drafter(drafter_dir, target)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rope_scaling": {"type": "yarn"}}, "rope type 'yarn'"),
        ({"num_hidden_layers": "three"}, "num_hidden_layers"),
        ({"num_key_value_heads": 0}, "num_key_value_heads"),  # was a ZeroDivisionError
        ({"intermediate_size": -3}, "intermediate_size"),  # was a torch RuntimeError
        ({"model_type": "mistral"}, "model_type 'mistral'"),
    ],
)
def test_unsupported_or_malformed_target_config(
    tmp_path: Path, changes: dict, message: str
) -> None:
    target_dir, _ = random_pair(tmp_path, seed=8)
    edit_config(target_dir, **changes)
    with pytest.raises(RunnerError, match=message):
        load_target(target_dir)


def test_missing_folder_and_corrupt_weights(tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match="model folder not found"):
        load_target(tmp_path / "nope")
    target_dir, _ = random_pair(tmp_path, seed=9)
    (target_dir / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad json")
    with pytest.raises(RunnerError, match="not a readable safetensors file"):
        load_target(target_dir)


def test_a_config_too_large_or_too_deep_is_refused_not_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernels_ref import checkpoint

    target_dir, _ = random_pair(tmp_path, seed=10)
    config = target_dir / "config.json"
    monkeypatch.setattr(checkpoint, "MAX_JSON_BYTES", config.stat().st_size - 1)
    with pytest.raises(RunnerError, match=r"config.json: larger than"):
        load_target(target_dir)
    monkeypatch.undo()
    config.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RunnerError, match="config.json: not valid JSON"):
        load_target(target_dir)


def test_fixture_pair_is_byte_deterministic(tmp_path: Path) -> None:
    def digest(folder: Path) -> dict[str, str]:
        return {
            str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }

    make_fixture_pair(tmp_path / "a")
    make_fixture_pair(tmp_path / "b")
    make_fixture_pair(tmp_path / "b", force=True)  # rewriting in place: the same bytes again
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert sorted(digest(tmp_path / "a")) == [
        "drafter/config.json",
        "drafter/dflash.py",
        "drafter/model.safetensors",
        "target/config.json",
        "target/generation_config.json",
        "target/model.safetensors",
        "target/tokenizer.json",
        "target/tokenizer_config.json",
    ]
    config = json.loads((tmp_path / "a" / "drafter" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["auto_map"] == {"AutoModel": "dflash.DFlashDraftModel"}
    assert config["dflash_config"]["mask_token_id"] == 259


QWEN3_8B = {  # the shape fields of Qwen/Qwen3-8B's config.json
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "use_sliding_window": False,
    "sliding_window": None,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
}
ZLAB_DRAFTER = {  # a z-lab/Qwen3-8B-DFlash-b16 style config.json
    **{k: v for k, v in QWEN3_8B.items() if k != "architectures"},
    "architectures": ["DFlashDraftModel"],
    "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
    "block_size": 16,
    "num_hidden_layers": 5,
    "num_target_layers": 36,
    "layer_types": ["full_attention"] * 5,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
}


def test_real_qwen3_and_zlab_configs_build_the_published_shapes() -> None:
    target_config = ModelConfig.from_dict(QWEN3_8B, "Qwen3-8B")
    drafter_config = DrafterConfig.from_dict(ZLAB_DRAFTER, "Qwen3-8B-DFlash-b16")
    drafter_config.check_against(target_config, "Qwen3-8B-DFlash-b16")
    with torch.device("meta"):  # shapes only, no memory
        target, drafter = Target(target_config), Drafter(drafter_config)
    shapes = {k: tuple(v.shape) for k, v in drafter.state_dict().items()}
    assert shapes["fc.weight"] == (4096, 5 * 4096)
    assert shapes["layers.4.self_attn.k_proj.weight"] == (8 * 128, 4096)
    assert shapes["layers.0.self_attn.q_norm.weight"] == (128,)
    assert "embed_tokens.weight" not in shapes and "lm_head.weight" not in shapes
    target_shapes = {k: tuple(v.shape) for k, v in target.state_dict().items()}
    assert target_shapes["lm_head.weight"] == (151936, 4096)
    assert target_shapes["model.layers.35.mlp.down_proj.weight"] == (4096, 12288)
    flat = {**ZLAB_DRAFTER, "mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]}
    del flat["dflash_config"]  # some third-party checkpoints put the DFlash fields at top level
    assert DrafterConfig.from_dict(flat, "flat").target_layer_ids == (1, 9, 17, 25, 33)


def test_the_shape_check_does_not_import_torch_dynamo(builtin_pair):
    """The meta-device build that checks shapes skips initialisation: torch's meta `normal_`
    imported torch._dynamo (seconds of every difftest and gate) to fill nothing."""
    import subprocess
    import sys

    target, drafter = builtin_pair.target, builtin_pair.drafter
    code = ("import sys; from kernels_ref.load import load_drafter, load_target; "
            f"t = load_target({str(target)!r}); load_drafter({str(drafter)!r}, t); "
            "sys.exit('torch._dynamo' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
