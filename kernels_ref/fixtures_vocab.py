"""Tiny target/drafter pairs with a real vocabulary and a real chat template.

`make_vocab_pair(out_dir, "qwen3" | "llama3", tree, cache_dir)` writes `out_dir/target`: a tiny
Qwen3 or Llama-3.1 model with the real vocabulary size (151,936 / 128,256 ids), hidden size 64
and head_dim 32 (what vLLM serves), the `tokenizer.json` `kernels_ref.vocab` builds from the
llama.cpp tree's vocab GGUF, and the tree's `Qwen-Qwen3-0.6B.jinja` /
`meta-llama-Llama-3.1-8B-Instruct.jinja` copied byte for byte as `chat_template.jinja`; and
`out_dir/drafter`, a DFlash drafter reading target layers [1, 2]. Weights are seeded random (the
same bytes on every run with the same torch), not trained: acceptance is low, which a lossless
diff does not need.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from kernels_ref.config import ModelConfig
from kernels_ref.drafter import Drafter, DrafterConfig
from kernels_ref.fixtures import DRAFTER_CONFIG, readable_by_all, write_pair
from kernels_ref.model import Target
from kernels_ref.vocab import RealVocab, cached_tokenizer_json, real_vocab, tokenizer_config

SEED = 23
Stage = Callable[[str], AbstractContextManager[object]]  # one step of the work, for progress
MAX_POSITIONS = 4096
SHAPE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "num_hidden_layers": 4,
    "max_position_embeddings": MAX_POSITIONS,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,  # tied, a random target echoes its last prompt token
    "torch_dtype": "float32",
    "transformers_version": "4.51.0",
    "use_cache": True,
}


def _added_ids(tokenizer_path: Path) -> dict[str, int]:
    """The ids of a `tokenizer.json`'s added tokens, by their text."""
    vocab = json.loads(tokenizer_path.read_text(encoding="utf-8"))
    return {entry["content"]: entry["id"] for entry in vocab["added_tokens"]}


def target_config(vocab: RealVocab, bos_id: int | None, eos_id: int) -> dict[str, Any]:
    """`config.json` of the tiny target for `vocab`."""
    common = {**SHAPE, "vocab_size": vocab.size, "bos_token_id": bos_id, "eos_token_id": eos_id}
    if vocab.name == "qwen3":
        return {**common, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
                "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
                "use_sliding_window": False, "max_window_layers": SHAPE["num_hidden_layers"]}
    return {**common, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
            "mlp_bias": False, "pretraining_tp": 1, "rope_scaling": None,
            "rope_theta": 500000.0}


def drafter_config(target: dict[str, Any], mask_id: int) -> dict[str, Any]:
    """`config.json` of the DFlash drafter for `target` (2 layers, reading target layers 1, 2)."""
    shared = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "head_dim", "max_position_embeddings", "rms_norm_eps", "vocab_size",
              "bos_token_id", "eos_token_id", "rope_theta")
    config = {**DRAFTER_CONFIG, **{key: target[key] for key in shared}}
    config.update(num_hidden_layers=2, num_target_layers=target["num_hidden_layers"],
                  torch_dtype="float32",
                  dflash_config={"mask_token_id": mask_id, "target_layer_ids": [1, 2]})
    return config


def _weights(target: dict[str, Any], drafter: dict[str, Any]) -> tuple[dict, dict]:
    torch.manual_seed(SEED)
    models = (Target(ModelConfig.for_target(target, Path("config.json"))),
              Drafter(DrafterConfig.from_dict(drafter, "drafter")))
    with torch.no_grad():  # RMSNorm weights start at 1; jitter them so a wrong load shows
        for module in models:
            for name, param in module.named_parameters():
                if name.endswith("norm.weight"):
                    param.add_(0.1 * torch.randn_like(param))
    return models[0].state_dict(), models[1].state_dict()


def _no_stage(_: str) -> AbstractContextManager[object]:
    return nullcontext()


def make_vocab_pair(out_dir: Path, name: str, tree: Path, cache_dir: Path, *,
                    force: bool = False, stage: Stage = _no_stage) -> tuple[Path, Path]:
    """Write the `name` pair (`qwen3`, `llama3`) to `out_dir/{target,drafter}`; return both.

    `tree` is the llama.cpp source tree (its `models/` holds the vocab GGUFs and templates);
    the built tokenizer is cached in `cache_dir`. An existing `target` or `drafter` is a
    `FileExistsError` unless `force`, which replaces both. Each step runs inside
    `stage(its name)` (the CLI shows them as progress). Every file written is mode 0644.
    """
    vocab = real_vocab(name)
    models = Path(tree) / "models"
    template = models / "templates" / vocab.template
    out_dir = Path(out_dir)
    for folder in ("target", "drafter"):
        existing = out_dir / folder
        if not force and (existing.exists() or existing.is_symlink()):
            raise FileExistsError(errno.EEXIST, "exists; pass --force to delete and rewrite it",
                                  str(existing))
    with stage(f"tokenizer from {vocab.gguf} (built once, then cached)"):
        tokenizer = cached_tokenizer_json(models, vocab, cache_dir)
        added = _added_ids(tokenizer)
    source = template.read_bytes()
    bos_id = None if vocab.bos_token is None else added[vocab.bos_token]
    eos_id = added[vocab.eos_token]
    pad_id = None if vocab.pad_token is None else added[vocab.pad_token]
    mask_id = vocab.size - 1  # an unused reserved / padding id, as DFlash drafters use
    target = target_config(vocab, bos_id, eos_id)
    drafter = drafter_config(target, mask_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".fixtures-") as staging:
        with stage(f"seeded weights for {vocab.size:,} ids"):
            target_weights, drafter_weights = _weights(target, drafter)
        with stage("writing the pair"):
            staged_target, staged_drafter = write_pair(
                Path(staging), target_config=target, drafter_config=drafter,
                target_weights=target_weights, drafter_weights=drafter_weights)
        shutil.copyfile(tokenizer, staged_target / "tokenizer.json")
        (staged_target / "chat_template.jinja").write_bytes(source)
        generation = {"bos_token_id": bos_id, "do_sample": False, "eos_token_id": eos_id,
                      "pad_token_id": pad_id, "transformers_version": "4.51.0"}
        config = tokenizer_config(vocab, MAX_POSITIONS)
        for path, payload in ((staged_target / "generation_config.json", generation),
                              (staged_target / "tokenizer_config.json", config)):
            path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n",
                            encoding="utf-8")
        readable_by_all(staged_target, staged_drafter)
        for staged in (staged_target, staged_drafter):
            final = out_dir / staged.name
            if final.is_dir() and not final.is_symlink():
                shutil.rmtree(final)
            os.replace(staged, final)
    return out_dir / "target", out_dir / "drafter"
