"""The precision a GGUF's weights are stored in: what the logprob check's tolerance is chosen by.

Read with the `gguf` package after the tokenizer check has bounded the file's header
(`gguf_vocab.tokenizer_mismatch` runs first). The matrices decide (norms and biases stay F32 in
every conversion): all F32 is `float32`, one other type is that type (`float16`, `bfloat16`,
`q8_0`, ...), a mix (`Q4_K_M` holds Q4_K and Q6_K) is every type joined with `+`. A GGUF
with no matrices (a vocabulary-only file) says nothing: the caller takes the tightest tolerance,
float32's. Torch-free.
"""

from __future__ import annotations

from pathlib import Path

from dflash_guard.errors import InputError

NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def gguf_precision(path: Path) -> str | None:
    """The weight precision of the GGUF at `path` (`InputError` when it cannot be read)."""
    from gguf import GGUFReader

    try:
        types = {tensor.tensor_type.name for tensor in GGUFReader(path).tensors
                 if len([n for n in tensor.shape if n > 1]) >= 2}
    except Exception as error:  # noqa: BLE001 - the reader raises many types on bad input
        raise InputError(f"cannot read GGUF {path}: {type(error).__name__}: {error}") from None
    if not types:
        return None
    if types != {"F32"}:
        types.discard("F32")  # e.g. an F32 token embedding beside quantized layers
    return "+".join(sorted(NAMES.get(t, t.lower()) for t in types))
