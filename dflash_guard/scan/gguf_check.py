"""GGUF files: header and tensor-table sanity with the `gguf` package, and the chat templates
in its metadata (checked by `templates`)."""

from __future__ import annotations

import math
import os
import re
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from dflash_guard import rules
from dflash_guard.scan.gguf_layout import Layout, LayoutError, LimitError, check_layout
from dflash_guard.scan.interface import Finding, Rule, Severity
from dflash_guard.scan.regular import open_regular

if TYPE_CHECKING:
    from gguf.gguf_reader import ReaderField, ReaderTensor

DETECTOR = "gguf"
_BLOCK = re.compile(r"blk\.(\d+)\.")
TEMPLATE_KEY = "tokenizer.chat_template"


def scan_gguf_file(path: Path, display: str) -> list[Finding]:
    """Findings for one GGUF file; any error the reader raises on malformed input is one."""
    from gguf import GGUFReader

    def finding(
        rule: Rule, severity: Severity, message: str, member: str | None = None
    ) -> Finding:
        return Finding.of(
            rule, display, message, severity=severity, member=member, detector=DETECTOR
        )

    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            layout = check_layout(handle, size)
    except LimitError as error:
        return [finding(rules.UNSCANNABLE, Severity.high, f"GGUF header over a limit: {error}")]
    except (LayoutError, struct.error) as error:
        return [finding(rules.GGUF_MALFORMED, Severity.high, f"GGUF header misfit: {error}")]
    except OSError as error:
        return [finding(rules.UNSCANNABLE, Severity.high, f"cannot read: {error}")]
    misplaced = layout_problems(layout, size)
    if misplaced:  # the reader would fail on these (or read the wrong bytes): report them
        return [finding(rules.GGUF_TENSORS, Severity.high, message) for message in misplaced]
    try:
        reader = GGUFReader(path)
        fields = dict(reader.fields)
        tensors = list(reader.tensors)
    except Exception as error:  # noqa: BLE001 - the reader raises many types on bad input
        return [
            finding(
                rules.GGUF_MALFORMED,
                Severity.high,
                f"the gguf reader rejects it: {type(error).__name__}: {error}",
            )
        ]
    findings: list[Finding] = []
    names = [tensor.name for tensor in tensors]
    if len(names) != len(set(names)):
        findings.append(finding(rules.GGUF_TENSORS, Severity.high, "duplicate tensor names"))
    findings += [finding(rules.GGUF_TENSORS, Severity.high, message)
                 for message in declared_problems(fields, tensors)]
    if "general.architecture" not in fields:
        findings.append(
            finding(rules.GGUF_METADATA, Severity.medium, "no general.architecture key")
        )
    for key, field in fields.items():
        name = key.split("\0", 1)[0]  # llama.cpp compares C strings: up to the first NUL
        if name != TEMPLATE_KEY and not name.startswith(TEMPLATE_KEY + "."):
            continue
        try:
            source = field.contents()
        except Exception as error:  # noqa: BLE001 - malformed field
            findings.append(
                finding(
                    rules.GGUF_METADATA, Severity.high, f"{key} cannot be read: {error}", member=key
                )
            )
            continue
        if not isinstance(source, str):
            findings.append(
                finding(rules.GGUF_METADATA, Severity.high, f"{key} is not a string", member=key)
            )
            continue
        from dflash_guard.scan.template_check import check_template  # jinja2: only for a template

        findings.extend(check_template(source, display, member=key))
    return findings


def layout_problems(layout: Layout, size: int) -> list[str]:
    """Tensor data as llama.cpp's loader requires it: each tensor at exactly the running
    offset of the data section (aligned to `general.alignment`, in order, no gap, no overlap)
    and inside the file; sizes from the `gguf` library's table of GGML types."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    alignment, start = layout.alignment, layout.data_start
    problems = []
    expected = 0
    for tensor in layout.tensors:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(tensor.ggml_type)]
        except (ValueError, KeyError):
            problems.append(f"tensor {tensor.name!r} has unknown GGML type {tensor.ggml_type}")
            continue
        elements = math.prod(tensor.dims)
        if elements % block:
            problems.append(f"tensor {tensor.name!r}: {elements} elements are not whole "
                            f"blocks of {block}")
        offset, length = tensor.offset, elements * type_size // block
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
        if end > size:
            problems.append(f"tensor {tensor.name!r} ends at byte {end}, past the file "
                            f"({size} bytes)")
        expected = max(expected, offset + -(-length // alignment) * alignment)
    return problems


def declared_problems(fields: dict[str, ReaderField], tensors: list[ReaderTensor]) -> list[str]:
    """The header's declared sizes against the tensors: `{arch}.block_count` layers
    (`blk.N.` for exactly N < block_count), `{arch}.embedding_length` and the vocabulary size
    against `token_embd.weight`. A key missing where the tensors need it is a finding."""
    if not tensors:
        return []  # a vocabulary-only file: nothing to compare
    arch = _scalar(fields, "general.architecture")
    problems: list[str] = []
    blocks = sorted({int(m.group(1)) for t in tensors if (m := _BLOCK.match(t.name))})
    declared = _scalar(fields, f"{arch}.block_count") if isinstance(arch, str) else None
    if blocks and not isinstance(declared, int):
        problems.append(f"the tensors hold {len(blocks)} blocks but {arch}.block_count is "
                        "missing: loaders size the model from it")
    elif isinstance(declared, int) and blocks != list(range(declared)):
        problems.append(f"{arch}.block_count is {declared} but the tensors hold blocks "
                        f"{blocks[:8]}{'...' if len(blocks) > 8 else ''} ({len(blocks)})")
    embedding = next((t for t in tensors if t.name == "token_embd.weight"), None)
    if embedding is not None and isinstance(arch, str):
        shape = [int(d) for d in embedding.shape]
        width = _scalar(fields, f"{arch}.embedding_length")
        if not isinstance(width, int):
            problems.append(f"{arch}.embedding_length is missing: token_embd.weight {shape} "
                            "cannot be checked")
        elif shape[0] != width:
            problems.append(f"token_embd.weight is {shape} but {arch}.embedding_length is "
                            f"{width}")
        tokens = fields.get("tokenizer.ggml.tokens")
        count = len(tokens.data) if tokens is not None else None
        if count is not None and len(shape) > 1 and shape[1] != count:
            problems.append(f"token_embd.weight has {shape[1]} rows but the vocabulary "
                            f"holds {count} tokens")
    return problems


def _scalar(fields: dict[str, ReaderField], key: str) -> object:
    field = fields.get(key)
    if field is None:
        return None
    try:
        value = field.contents()
    except Exception:  # noqa: BLE001 - a malformed field reads as missing
        return None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else value
