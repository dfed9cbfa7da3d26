"""Helpers for the kernels_ref and difftest tests: random tiny target/drafter pairs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from kernels_ref.drafter import Drafter, DrafterConfig
from kernels_ref.fixtures import DRAFTER_CONFIG, TARGET_CONFIG, write_pair
from kernels_ref.model import ModelConfig, Target


def random_configs(
    *,
    hidden: int = 32,
    target_layers: int = 3,
    drafter_layers: int = 1,
    block_size: int = 4,
    layer_ids: tuple[int, ...] = (0, 2),
    tie: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Configs of a tiny random pair (4 heads, 2 KV heads, head_dim 8)."""
    shape = {
        "hidden_size": hidden,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "intermediate_size": 2 * hidden,
    }
    target = {
        **copy.deepcopy(TARGET_CONFIG),
        **shape,
        "num_hidden_layers": target_layers,
        "tie_word_embeddings": tie,
        "max_position_embeddings": 128,
    }
    drafter = {
        **copy.deepcopy(DRAFTER_CONFIG),
        **shape,
        "num_hidden_layers": drafter_layers,
        "num_target_layers": target_layers,
        "block_size": block_size,
    }
    drafter["dflash_config"]["target_layer_ids"] = list(layer_ids)
    return target, drafter


def random_pair(out_dir: Path, seed: int, **shape: Any) -> tuple[Path, Path]:
    """Write a random-weight pair (PyTorch default init: decisive logits, tau near 1)."""
    target_config, drafter_config = random_configs(**shape)
    torch.manual_seed(seed)
    target = Target(ModelConfig.from_dict(target_config, "target"))
    drafter = Drafter(DrafterConfig.from_dict(drafter_config, "drafter"))
    with torch.no_grad():  # RMSNorm weights start at 1; jitter them so a wrong load shows
        for module in (target, drafter):
            for name, param in module.named_parameters():
                if name.endswith("norm.weight"):
                    param.add_(0.1 * torch.randn_like(param))
    return write_pair(
        out_dir,
        target_config=target_config,
        drafter_config=drafter_config,
        target_weights=target.state_dict(),
        drafter_weights=drafter.state_dict(),
    )


DRIFTED_TENSOR = "model.layers.1.mlp.down_proj.weight"


def drifted_target(target_dir: Path, out: Path, *, tensor: str = DRIFTED_TENSOR,
                   scale: float = 1.02) -> Path:
    """A copy of `target_dir` with one weight matrix scaled by `scale` (issue 38's drifted
    target: same tokenizer and config, greedy tokens that mostly agree, other logprobs)."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(target_dir, out)
    for path in out.glob("*.safetensors"):
        path.chmod(0o644)
        weights = load_file(path)
        if tensor in weights:
            weights[tensor] = weights[tensor] * scale
            save_file(weights, path, metadata={"format": "pt"})
            return out
    raise KeyError(f"{tensor} is not in {target_dir}")


def swapped_drafter(drafter_dir: Path, out: Path, *, seed: int = 0) -> Path:
    """A copy of `drafter_dir` with the rows of every weight matrix shuffled: another drafter for
    the same target (same config, code, shapes and weight statistics; its drafts mostly
    rejected), issue 38's swapped drafter."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(drafter_dir, out)
    generator = torch.Generator().manual_seed(seed)
    for path in out.glob("*.safetensors"):
        path.chmod(0o644)
        weights = load_file(path)
        for name, weight in weights.items():
            if weight.ndim == 2:
                order = torch.randperm(weight.shape[0], generator=generator)
                weights[name] = weight[order].contiguous()
        save_file(weights, path, metadata={"format": "pt"})
    return out
