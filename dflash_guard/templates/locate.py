"""Where chat templates live: `tokenizer_config.json` (a string, `[{name, template}]` or
`{name: template}`),
`chat_template.json` and `*.jinja` files (`chat_template.jinja`, `additional_chat_templates/`,
any other); each is checked by `grammar` (GGUF metadata
templates by `scan.weights.gguf`). jinja2 loads only when a template file is scanned.
"""

from __future__ import annotations

import re
from pathlib import Path

from dflash_guard import fileio, rules
from dflash_guard.fileio import read_json, read_regular
from dflash_guard.findings import Finding
from dflash_guard.severity import Severity

ADDITIONAL_TEMPLATES = "additional_chat_templates"  # transformers' CHAT_TEMPLATE_DIR
_UNREVIEWED_DIGEST = re.compile(r"\(sha256 ([0-9a-f]{64})\)")


def unreviewed_digest(finding: Finding) -> str | None:
    """The sha256 a DG-TPL-UNREVIEWED finding names (`grammar.review_findings`), else
    None."""
    match = _UNREVIEWED_DIGEST.search(finding.message)
    return match.group(1) if match and finding.rule_id == rules.TPL_UNREVIEWED.id else None


def template_files(folder: Path) -> dict[str, Path]:
    """The template files transformers reads from a folder, by the name it gives each:
    `chat_template.jinja` as `default`, then `additional_chat_templates/NAME.jinja` as `NAME`
    (a `default.jinja` there replaces it); when any exists, `tokenizer_config.json`'s template
    is not read."""
    files: dict[str, Path] = {}
    if (folder / "chat_template.jinja").is_file():
        files["default"] = folder / "chat_template.jinja"
    extra = folder / ADDITIONAL_TEMPLATES
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            if path.is_file():
                files[path.name.removesuffix(".jinja")] = path
    return files


def read_jinja(path: Path) -> str:
    """The text of a `.jinja` template, read up to the scan's text limit: `OSError` when it
    cannot be read, `ValueError` when it is larger or not UTF-8."""
    return read_regular(path, fileio.MAX_TEXT_BYTES).decode("utf-8")


def scan_jinja_file(path: Path, display: str,
                    reviewed: frozenset[str] = frozenset()) -> list[Finding]:
    """A `chat_template.jinja` (or any `.jinja`) file; `reviewed`: the sha256 of templates
    a reviewer accepted (beyond the catalog's)."""
    from dflash_guard.templates.grammar import DETECTOR, check_template, review_findings

    try:
        source = read_jinja(path)
    except (OSError, ValueError) as error:
        return [
            Finding(
                rules.UNSCANNABLE.id,
                Severity.high,
                display,
                f"cannot read: {error}",
                detector=DETECTOR,
            )
        ]
    return check_template(source, display) + review_findings(source, display, None, reviewed)


def templates_in_config(config: object) -> list[tuple[str, str]]:
    """`(name, source)` of each chat template in a tokenizer/processor config dict."""
    if not isinstance(config, dict):
        return []
    value = config.get("chat_template")
    if isinstance(value, str):
        return [("chat_template", value)]
    if isinstance(value, list):
        return [
            (f"chat_template[{item.get('name', i)}]", item["template"])
            for i, item in enumerate(value)
            if isinstance(item, dict) and isinstance(item.get("template"), str)
        ]
    if isinstance(value, dict):  # {"default": "...", "tool_use": "..."}
        return [(f"chat_template[{name}]", text) for name, text in value.items()
                if isinstance(text, str)]
    return []


def scan_config_templates(path: Path, display: str,
                          reviewed: frozenset[str] = frozenset()) -> list[Finding]:
    """Chat templates inside `tokenizer_config.json` or `chat_template.json`."""
    try:
        config = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        from dflash_guard.templates.grammar import DETECTOR

        return [
            Finding(
                rules.CONFIG_INVALID.id,
                Severity.medium,
                display,
                f"not readable JSON: {error}",
                detector=DETECTOR,
            )
        ]
    found = templates_in_config(config)
    if not found:
        return []  # no template: jinja2 stays unloaded
    from dflash_guard.templates.grammar import check_template, review_findings

    findings: list[Finding] = []
    for name, source in found:
        findings.extend(check_template(source, display, member=name))
        findings.extend(review_findings(source, display, name, reviewed))
    return findings
