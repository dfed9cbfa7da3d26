"""Which safetensors files of a model folder kernels_ref decodes, or why the folder's weight set
is ambiguous. Torch-free, so the gate and launch can ask without loading torch.

kernels_ref reads `model.safetensors`, or the shards `model.safetensors.index.json` names. An
engine may read more: vLLM globs every top-level `*.safetensors` and keeps only the indexed ones
when there is an index, else all of them, a later file's tensor replacing an earlier one's.
A folder where the two readings differ (a second `*.safetensors` beside `model.safetensors`, a
shard no index names) is refused here, naming the files: the diff test would prove one model and
the engine serve another.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

from kernels_ref.errors import RunnerError

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_INDEX_BYTES = 64 * 1024 * 1024


def indexed_shards(folder: Path) -> list[str] | None:
    """The shard names the folder's index maps tensors to (sorted), or None without an index."""
    index = folder / INDEX
    if not index.is_file():
        return None
    try:
        with index.open("rb") as handle:
            raw = handle.read(MAX_INDEX_BYTES + 1)
        if len(raw) > MAX_INDEX_BYTES:
            raise RunnerError(f"{index}: larger than {MAX_INDEX_BYTES:,} bytes")
        weight_map = json.loads(raw.decode("utf-8")).get("weight_map")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError,
            AttributeError) as exc:
        raise RunnerError(f"{index}: not valid JSON ({exc})") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise RunnerError(f"{index}: missing or empty 'weight_map'")
    shards = sorted({str(v) for v in weight_map.values()})
    for shard in shards:
        if Path(shard).name != shard:
            raise RunnerError(f"{index}: shard name {shard!r} is not a plain file name")
    return shards


def weight_files(folder: Path) -> list[str]:
    """The safetensors files kernels_ref decodes (names in `folder`), refusing a folder whose
    top-level `*.safetensors` files are not exactly those."""
    shards = indexed_shards(folder)
    if shards is None:
        if not (folder / SINGLE).is_file():
            raise RunnerError(f"{folder}: neither {SINGLE} nor {INDEX}")
        chosen = [SINGLE]
    else:
        chosen = shards
    # the glob an engine runs (vLLM's `_prepare_weights`): hidden files are not matched
    present = sorted(os.path.basename(p)
                     for p in glob.glob(os.path.join(glob.escape(str(folder)), "*.safetensors")))
    extra = [name for name in present if name not in chosen]
    if extra:
        how = f"the index names {len(chosen)} shard(s)" if shards is not None else \
            f"no index, so {SINGLE} alone is decoded"
        raise RunnerError(f"{folder}: ambiguous weight set: {', '.join(extra)} beside "
                          f"{', '.join(chosen)} ({how}); an engine that reads every "
                          "*.safetensors would serve weights the diff test never decoded")
    return chosen
