"""GGUF files: header and tensor-table sanity with the `gguf` package, and the chat templates
in its metadata (checked by `templates`)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from dflash_guard.scan import rules
from dflash_guard.scan.gguf_layout import LayoutError, LimitError, check_layout
from dflash_guard.scan.interface import Finding, Rule, Severity
from dflash_guard.scan.regular import open_regular

DETECTOR = "gguf"
TEMPLATE_KEY = "tokenizer.chat_template"


def scan_gguf_file(path: Path, display: str) -> list[Finding]:
    """Findings for one GGUF file; any error the reader raises on malformed input is one."""
    from gguf import GGUFReader

    def finding(rule: Rule, severity: Severity, message: str, member: str | None = None):
        return Finding.of(
            rule, display, message, severity=severity, member=member, detector=DETECTOR
        )

    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            check_layout(handle, size)
    except LimitError as error:
        return [finding(rules.UNSCANNABLE, Severity.high, f"GGUF header over a limit: {error}")]
    except (LayoutError, struct.error) as error:
        return [finding(rules.GGUF_MALFORMED, Severity.high, f"GGUF header misfit: {error}")]
    except OSError as error:
        return [finding(rules.UNSCANNABLE, Severity.high, f"cannot read: {error}")]
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
    for tensor in tensors:
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size:
            findings.append(
                finding(
                    rules.GGUF_TENSORS,
                    Severity.high,
                    f"tensor {tensor.name!r} ends at byte {end}, past the file ({size} bytes)",
                )
            )
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
