"""Helpers for the CUDA-path tests: tiny random-weight pairs built in memory."""

from __future__ import annotations

import pytest
import torch

from kernels_ref.drafter import Drafter, DrafterConfig
from kernels_ref.fixtures import MASK_ID, VOCAB_SIZE
from kernels_ref.model import ModelConfig, Target
from kernels_ref.rope import Rope

NO_CUDA = "needs a CUDA device (torch.cuda.is_available() is False)"
gpu_only = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)


def tiny_pair(seed: int, block_size: int = 4, dtype: torch.dtype = torch.float32):
    """A random 3-layer target and a 1-layer drafter (hidden 32), norms jittered."""
    shape = ModelConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        rope=Rope(theta=10000.0),
        max_position_embeddings=128,
    )
    torch.manual_seed(seed)
    target = Target(shape)
    drafter_layers = ModelConfig(**{**shape.__dict__, "num_hidden_layers": 1})
    drafter = Drafter(DrafterConfig(drafter_layers, block_size, 3, MASK_ID, (0, 2)))
    with torch.no_grad():
        for module in (target, drafter):
            for name, param in module.named_parameters():
                if name.endswith("norm.weight"):
                    param.add_(0.1 * torch.randn_like(param))
    return target.to(dtype).eval(), drafter.to(dtype).eval()
