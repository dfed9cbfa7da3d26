"""Chat templates: a static check with Jinja's own parser; nothing is ever rendered.

CVE-2024-34359 was a GGUF `tokenizer.chat_template` rendered in a plain Jinja2 environment:
`{{ ''.__class__.__mro__[1].__subclasses__() }}` reaches `os.popen`. The fix is to render in
`ImmutableSandboxedEnvironment`; this check flags the shapes such a payload takes (dunder attribute
access, `|attr`, computed or escaped attribute names, template globals that leak `__globals__`) so a
template is refused before any engine renders it, sandboxed or not.
"""

from __future__ import annotations

import re

from jinja2 import Environment, nodes
from jinja2.exceptions import TemplateSyntaxError

from dflash_guard.scan import rules
from dflash_guard.scan.interface import Finding, Rule, Severity
from dflash_guard.scan.templates import DETECTOR

# Globals through which SSTI payloads reach Python internals (lipsum.__globals__ and friends).
_RISKY_NAMES = frozenset(
    [
        "lipsum",
        "cycler",
        "joiner",
        "self",
        "config",
        "request",
        "url_for",
        "get_flashed_messages",
        "__builtins__",
        "os",
        "range_",
        "globals",
    ]
)
_RISKY_ATTRS = frozenset(
    [
        "mro",
        "func_globals",
        "f_globals",
        "f_locals",
        "f_back",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "tb_frame",
        "co_code",
        "popen",
        "system",
    ]
)
_DUNDER = re.compile(r"__\w+__")
_ESCAPED_UNDERSCORE = re.compile(r"\\x5f|\\u005f|\\U0000005f|\\137", re.IGNORECASE)


def check_template(source: str, display: str, member: str | None = None) -> list[Finding]:
    """Findings for one chat template's source text."""

    def finding(rule: Rule, severity: Severity, message: str, line: int | None) -> Finding:
        return Finding(
            rule.id, severity, display, message, line=line, member=member, detector=DETECTOR
        )

    findings: list[Finding] = []
    if _ESCAPED_UNDERSCORE.search(source):
        findings.append(
            finding(
                rules.TPL_ESCAPED_NAME,
                Severity.high,
                "escaped underscore (\\x5f and the like) hides a dunder name",
                None,
            )
        )
    try:
        tree = Environment().parse(source)
        problems = [(node, p) for node in tree.find_all(nodes.Node) for p in _node_problems(node)]
    except TemplateSyntaxError as error:
        findings.append(
            finding(
                rules.TPL_SYNTAX,
                Severity.medium,
                f"does not parse as Jinja: {error.message}",
                error.lineno,
            )
        )
        return findings
    except RecursionError:
        findings.append(
            finding(rules.UNSCANNABLE, Severity.high, "nested too deeply to check", None)
        )
        return findings
    for node, (rule, severity, message) in problems:
        findings.append(finding(rule, severity, message, getattr(node, "lineno", None)))
    return findings


def _node_problems(node: nodes.Node) -> list[tuple[Rule, Severity, str]]:
    if isinstance(node, nodes.Getattr):
        if node.attr.startswith("__"):
            return [
                (
                    rules.TPL_DUNDER,
                    Severity.critical,
                    f"attribute access to {node.attr!r} (sandbox escape shape)",
                )
            ]
        if node.attr.startswith("_") or node.attr in _RISKY_ATTRS:
            return [(rules.TPL_DUNDER, Severity.high, f"attribute access to {node.attr!r}")]
    elif isinstance(node, nodes.Getitem):
        key = node.arg
        if isinstance(key, nodes.Const) and isinstance(key.value, str):
            if key.value.startswith("_") or key.value in _RISKY_ATTRS:
                return [
                    (
                        rules.TPL_DUNDER,
                        Severity.critical,
                        f"subscript access to {key.value!r} (sandbox escape shape)",
                    )
                ]
        elif _builds_string(key):
            return [
                (
                    rules.TPL_COMPUTED_ATTR,
                    Severity.high,
                    "subscript with a computed name (string built at render time)",
                )
            ]
    elif isinstance(node, nodes.Filter) and node.name == "attr":
        return [
            (
                rules.TPL_ATTR_FILTER,
                Severity.high,
                "|attr filter reads an attribute by a name given as data",
            )
        ]
    elif isinstance(node, nodes.Name) and node.name in _RISKY_NAMES:
        return [
            (
                rules.TPL_RISKY_GLOBAL,
                Severity.medium,
                f"uses the global {node.name!r}, a usual stepping stone to __globals__",
            )
        ]
    elif isinstance(node, nodes.Const) and isinstance(node.value, str):
        if _DUNDER.search(node.value):
            return [
                (
                    rules.TPL_DUNDER,
                    Severity.high,
                    f"string constant names a dunder ({_DUNDER.search(node.value).group(0)})",
                )
            ]
    elif isinstance(node, (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        return [
            (rules.TPL_INCLUDE, Severity.medium, "loads another template (include/import/extends)")
        ]
    return []


def _builds_string(node: nodes.Node) -> bool:
    """Whether an expression builds a string at render time (concatenation, join, format...)."""
    if isinstance(node, (nodes.Concat, nodes.Filter, nodes.Call, nodes.Mod)):
        return True
    if isinstance(node, nodes.Add):
        return any(
            isinstance(c, nodes.Const) and isinstance(c.value, str)
            for c in node.find_all(nodes.Const)
        )
    return False
