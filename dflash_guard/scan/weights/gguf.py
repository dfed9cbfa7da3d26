"""GGUF files: the header and tensor table as llama.cpp's loader reads them
(`kernels_ref.gguf_reader`, one bounded walk of bounded reads), the chat templates in
its metadata (checked by `templates`) and its sampling defaults (`gguf_sampling`).

Past what the format reader refuses, each check here is one llama.cpp's model loader makes
before a model serves (the pinned tree's `src/llama-vocab.cpp` and `src/llama-model.cpp`):
token scores and types of the right type and at least as many as the tokens, the attention
head counts present and dividing the embedding width, every block carrying the tensors the
others carry, and `token_embd`/`output` rows matching the vocabulary.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from dflash_guard import rules
from dflash_guard.fileio import open_binary
from dflash_guard.findings import Finding
from dflash_guard.rules import Rule
from dflash_guard.scan.generation import REVIEWED
from dflash_guard.scan.weights import gguf_sampling
from dflash_guard.scan.weights.gguf_tokens import (
    FLOAT32,
    INT32,
    TOKENS,
    loader_refusals,
    number,
    token_problems,
)
from dflash_guard.severity import Severity
from kernels_ref.gguf_reader import ARRAY, GGUF, STRING, GGUFError, GGUFLimit, read_gguf

DETECTOR = "gguf"
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")
_ATTENTION = re.compile(r"attn_(q|k|v|qkv|output)\.weight")
TEMPLATE_KEY = "tokenizer.chat_template"
# Architectures whose every block has the same tensors (llama.cpp's src/models/<arch>.cpp
# creates each block's tensors in one loop); hybrids and interleaved MoE are not in it.
UNIFORM_BLOCKS = frozenset({"llama", "qwen2", "qwen3"})


def scan_gguf_file(path: Path, display: str, reviewed: frozenset[str] = frozenset(),
                   reviewed_files: frozenset[str] = frozenset()) -> list[Finding]:
    """Findings for one GGUF file; a header llama.cpp's reader refuses is one; `reviewed`:
    the sha256 of the chat templates a reviewer accepted; `reviewed_files`: of the files whose
    sampling defaults a reviewer accepted (`gguf_sampling`). The file is hashed only when its
    sampling metadata has a finding, from the handle its header was read from."""

    def finding(
        rule: Rule, severity: Severity, message: str, member: str | None = None
    ) -> Finding:
        return Finding.of(
            rule, display, message, severity=severity, member=member, detector=DETECTOR
        )

    try:
        with open_binary(path) as handle, read_gguf(handle) as gguf:
            findings = _findings(gguf, display, finding, reviewed)
            sampling = gguf_sampling.problems(gguf)
            if sampling:
                digest = _sha256(handle)
                if digest not in reviewed_files:
                    findings += [finding(rules.GENERATION_DEFAULTS, severity,
                                         f"{message} (sha256 {digest}: once read, {REVIEWED})")
                                 for severity, message in sampling]
            return findings
    except GGUFLimit as error:
        return [finding(rules.UNSCANNABLE, Severity.high, f"GGUF header over a limit: {error}")]
    except GGUFError as error:
        return [finding(rules.GGUF_MALFORMED, Severity.high, f"GGUF header refused: {error}")]
    except OSError as error:
        return [finding(rules.UNSCANNABLE, Severity.high, f"cannot read: {error}")]


def _sha256(handle: BinaryIO) -> str:
    """The sha256 of the whole file open in `handle`, read in chunks from its start."""
    handle.seek(0)
    digest = hashlib.sha256()
    while chunk := handle.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def _findings(gguf: GGUF, display: str, finding: Callable[..., Finding],
              reviewed: frozenset[str]) -> list[Finding]:
    findings = [finding(rules.GGUF_TENSORS, Severity.high, message)
                for message in layout_problems(gguf) + declared_problems(gguf)]
    findings += [finding(rules.GGUF_METADATA, Severity.high, message)
                 for message in vocab_problems(gguf) + loader_refusals(gguf)]
    findings += [finding(rules.GGUF_TOKENS, Severity.high, message)
                 for message in token_problems(gguf)]
    if gguf.find("general.architecture") is None:
        findings.append(
            finding(rules.GGUF_METADATA, Severity.medium, "no general.architecture key")
        )
    for key, field in gguf.fields.items():
        name = key.split("\0", 1)[0]  # llama.cpp compares C strings: up to the first NUL
        if name != TEMPLATE_KEY and not name.startswith(TEMPLATE_KEY + "."):
            continue
        if field.type != STRING:
            findings.append(
                finding(rules.GGUF_METADATA, Severity.high, f"{key} is not a string", member=key)
            )
            continue
        try:
            source = gguf.raw(field)[8:].decode("utf-8")
        except UnicodeDecodeError as error:
            findings.append(finding(rules.GGUF_METADATA, Severity.high,
                                    f"{key} cannot be read: {error.reason}", member=key))
            continue
        # jinja2: only for a template
        from dflash_guard.templates.grammar import check_template, review_findings

        findings.extend(check_template(source, display, member=key))
        findings.extend(review_findings(source, display, key, reviewed))
    return findings


def layout_problems(gguf: GGUF) -> list[str]:
    """Tensor data as llama.cpp's loader requires it: each tensor at exactly the running
    offset of the data section (aligned to `general.alignment`, in order, no gap, no overlap)
    and inside the file."""
    alignment, start = gguf.alignment, gguf.data_start
    problems = []
    expected = 0
    for tensor in gguf.tensors:
        offset, length = tensor.offset, tensor.nbytes
        if offset % alignment:
            problems.append(f"tensor {tensor.name!r} at data offset {offset} is not aligned to "
                            f"{alignment} (general.alignment)")
        elif offset < expected:
            problems.append(f"tensor {tensor.name!r} at data offset {offset} overlaps the one "
                            f"before it or is out of order (expected {expected})")
        elif offset > expected:
            problems.append(f"tensor {tensor.name!r} at data offset {offset} leaves a gap "
                            f"after the one before it (expected {expected}; llama.cpp refuses)")
        end = start + offset + length
        if end > gguf.size:
            problems.append(f"tensor {tensor.name!r} ends at byte {end}, past the file "
                            f"({gguf.size} bytes)")
        expected = max(expected, offset + -(-length // alignment) * alignment)
    return problems


def _text(gguf: GGUF, key: str) -> str | None:
    field = gguf.find(key)
    if field is None or field.type != STRING:
        return None
    try:
        value = gguf.value(key)
    except GGUFError:
        return None
    return value if isinstance(value, str) else None


def declared_problems(gguf: GGUF) -> list[str]:
    """The header's declared sizes against the tensors, as llama.cpp's model loader sizes
    them: `{arch}.block_count` layers (`blk.N.` for exactly N < block_count), each block with
    the tensors the others have (uniform architectures), `{arch}.attention.head_count` present
    and dividing `{arch}.embedding_length` (no `key_length` given) with `head_count_kv`
    dividing it, and `token_embd.weight`/`output.weight` as wide as the embedding with a row
    per token. A key missing where the tensors need it is a finding."""
    tensors = gguf.tensors
    if not tensors:
        return []  # a vocabulary-only file: nothing to compare
    arch = _text(gguf, "general.architecture")
    if arch is None:
        return []
    problems: list[str] = []
    by_block: dict[int, set[str]] = {}
    for tensor in tensors:
        if match := _BLOCK.match(tensor.name):
            by_block.setdefault(int(match.group(1)), set()).add(match.group(2))
    blocks = sorted(by_block)
    declared = number(gguf, f"{arch}.block_count")
    if blocks and declared is None:
        problems.append(f"the tensors hold {len(blocks)} blocks but {arch}.block_count is "
                        "missing: loaders size the model from it")
    elif declared is not None and blocks != list(range(declared)):
        problems.append(f"{arch}.block_count is {declared} but the tensors hold blocks "
                        f"{blocks[:8]}{'...' if len(blocks) > 8 else ''} ({len(blocks)})")
    if arch in UNIFORM_BLOCKS and blocks:
        every = set().union(*by_block.values())
        for index in blocks:
            missing = sorted(every - by_block[index])
            if missing:
                problems.append(f"block {index} lacks {', '.join(missing[:4])}, which the other "
                                f"blocks have: llama.cpp's loader refuses a missing tensor")
    width = number(gguf, f"{arch}.embedding_length")
    heads, kv_heads = (number(gguf, f"{arch}.attention.{k}") for k in ("head_count",
                                                                        "head_count_kv"))
    attention = any(_ATTENTION.fullmatch(name) for names in by_block.values() for name in names)
    per_layer = any((f := gguf.find(f"{arch}.attention.{k}")) is not None and f.type == ARRAY
                    for k in ("head_count", "head_count_kv"))  # per-layer counts: not modelled
    if attention and arch in UNIFORM_BLOCKS and not per_layer:
        if not heads:
            problems.append(f"{arch}.attention.head_count is missing or 0: llama.cpp sizes "
                            "every attention tensor from it")
        elif (width is not None and width % heads
              and gguf.find(f"{arch}.attention.key_length") is None):
            problems.append(f"{arch}.attention.head_count {heads} does not divide "
                            f"{arch}.embedding_length {width} (llama.cpp's head size is "
                            "their quotient)")
        if heads and kv_heads is not None and (kv_heads == 0 or heads % kv_heads):
            problems.append(f"{arch}.attention.head_count_kv {kv_heads} does not divide "
                            f"head_count {heads}")
        elif heads and width is not None:
            problems += _attention_shapes(gguf, arch, width, heads, kv_heads or heads)
    tokens = gguf.find(TOKENS)
    count = tokens.count if tokens is not None and tokens.type == ARRAY else None
    named = {t.name: t for t in tensors}
    for name in ("token_embd.weight", "output.weight"):
        if name not in named:
            continue
        shape = list(named[name].dims)
        if width is None:
            problems.append(f"{arch}.embedding_length is missing: {name} {shape} "
                            "cannot be checked")
        elif shape[0] != width:
            problems.append(f"{name} is {shape} but {arch}.embedding_length is {width}")
        if count is not None and (len(shape) < 2 or shape[1] != count):
            rows = shape[1] if len(shape) > 1 else 1
            problems.append(f"{name} has {rows} rows but the vocabulary holds {count} tokens")
    return problems


def _attention_shapes(gguf: GGUF, arch: str, width: int, heads: int, kv_heads: int) -> list[str]:
    """Each block's separate q/k/v/output projections against the shapes llama.cpp creates them
    with (`src/models/{llama,qwen2,qwen3}.cpp`): head sizes from `key_length`/`value_length`,
    else the embedding over the heads; qwen2's query and output are square."""
    head_k = number(gguf, f"{arch}.attention.key_length") or width // heads
    head_v = number(gguf, f"{arch}.attention.value_length") or width // heads
    query = width if arch == "qwen2" else head_k * heads
    expected = {"attn_q.weight": [width, query], "attn_k.weight": [width, head_k * kv_heads],
                "attn_v.weight": [width, head_v * kv_heads], "attn_output.weight": [query, width]}
    problems = []
    for tensor in gguf.tensors:
        match = _BLOCK.match(tensor.name)
        if match and match.group(2) in expected and list(tensor.dims) != expected[match.group(2)]:
            problems.append(f"{tensor.name} is {list(tensor.dims)} but the head counts make it "
                            f"{expected[match.group(2)]}: llama.cpp's loader refuses the shape")
    return problems[:4]


def vocab_problems(gguf: GGUF) -> list[str]:
    """The tokenizer arrays as llama.cpp's vocabulary loader requires them (`llama_vocab::
    impl::load`): tokens an array of strings, scores an array of float32 or int32 and token
    types of int32, each at least as long as the tokens, merges an array of strings."""
    tokens = gguf.find(TOKENS)
    if tokens is None:
        return []
    if tokens.type != ARRAY or tokens.item_type != STRING:
        return [f"{TOKENS} is not an array of strings: llama.cpp refuses the vocabulary"]
    problems = []
    for key, kinds, what in (("tokenizer.ggml.scores", (FLOAT32, INT32), "float32 or int32"),
                             ("tokenizer.ggml.token_type", (INT32,), "int32")):
        field = gguf.find(key)
        if field is None:
            continue
        if field.type != ARRAY or field.item_type not in kinds:
            problems.append(f"{key} is not an array of {what}: llama.cpp refuses the vocabulary")
        elif field.count < tokens.count:
            problems.append(f"{key} has {field.count} items for {tokens.count} tokens: "
                            "llama.cpp refuses the vocabulary (index out of bounds)")
    merges = gguf.find("tokenizer.ggml.merges")
    bpe = _text(gguf, "tokenizer.ggml.model") == "gpt2"  # only BPE reads merges
    if bpe and merges is not None and (merges.type != ARRAY or merges.item_type != STRING):
        problems.append("tokenizer.ggml.merges is not an array of strings: llama.cpp refuses "
                        "the vocabulary")
    return problems
