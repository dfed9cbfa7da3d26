"""Model folder layouts the engine file-set tests share: Q2's override file, a real sharded
index (its benign twin), small GGUFs with llama.cpp's split keys, and a folder's locked set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.torch import load_file, save_file


def locked(folder: Path) -> set[str]:
    """Every file of `folder` as `lock` locks it (`.cache` and `.git` at the top left out)."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and p.relative_to(folder).parts[0] not in (".cache", ".git")}


def override(folder: Path, name: str = "zz-override.safetensors") -> Path:
    """Q2's second file: the embedding (tied LM head) with its rows reversed."""
    embed = load_file(str(folder / "model.safetensors"))["model.embed_tokens.weight"]
    save_file({"model.embed_tokens.weight": embed.flip(0).contiguous()}, str(folder / name))
    return folder / name


def shard(folder: Path) -> None:
    """The benign twin of Q2: the weights split over two shards a real index names."""
    tensors = load_file(str(folder / "model.safetensors"))
    names = sorted(tensors)
    half = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
            "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, keys in half.items():
        save_file({k: tensors[k].contiguous() for k in keys}, str(folder / file))
    (folder / "model.safetensors").unlink()
    weight_map = {k: file for file, keys in half.items() for k in keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def write_gguf(path: Path, split: tuple[int, int] | None = None) -> Path:
    """A small GGUF; `split` (number, count) adds llama.cpp's split keys."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "qwen3")
    if split is not None:
        writer.add_uint16("split.no", split[0])
        writer.add_uint16("split.count", split[1])
    writer.add_tensor(f"t{split[0] if split else 0}", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
