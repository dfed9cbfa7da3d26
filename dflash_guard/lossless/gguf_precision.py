"""The precision a GGUF's weights are stored in: what the logprob check's tolerance is chosen by.

Read from the tensor table by the tool's one GGUF reader (`kernels_ref.gguf_reader`, bounded;
no metadata value is decoded, so a 128,000-token vocabulary costs nothing). The matrices decide
(norms and biases stay F32 in every conversion): all F32 is `float32`, one other type is that
type (`float16`, `bfloat16`, `q8_0`, ...), a mix (`Q4_K_M` holds Q4_K and Q6_K) is every type
joined with `+`. A GGUF with no matrices (a vocabulary-only file) says nothing: the caller takes
the tightest tolerance, float32's. Torch-free.
"""

from __future__ import annotations

from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.fileio import open_binary
from kernels_ref.gguf_reader import GGUFError, read_gguf

NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def gguf_precision(path: Path) -> str | None:
    """The weight precision of the GGUF at `path` (`InputError` when it cannot be read)."""
    from gguf.constants import GGMLQuantizationType

    try:
        with open_binary(path) as handle, read_gguf(handle) as gguf:
            kinds = {t.ggml_type for t in gguf.tensors if len([n for n in t.dims if n > 1]) >= 2}
    except (OSError, GGUFError) as error:
        raise InputError(f"cannot read GGUF {path}: {error}") from None
    types = {GGMLQuantizationType(kind).name for kind in kinds}  # the reader knows each kind
    if not types:
        return None
    if types != {"F32"}:
        types.discard("F32")  # e.g. an F32 token embedding beside quantized layers
    return "+".join(sorted(NAMES.get(t, t.lower()) for t in types))
