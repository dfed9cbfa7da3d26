"""Chat templates: a static check with Jinja's own parser; nothing is ever rendered.

CVE-2024-34359 was a GGUF `tokenizer.chat_template` rendered in a plain Jinja2 environment:
`{{ ''.__class__.__mro__[1].__subclasses__() }}` reaches `os.popen`. Templates are parsed the way
transformers parses them (`ImmutableSandboxedEnvironment` with `loopcontrols` and a `generation`
tag) and checked against an allowlist of what real templates use: the methods they call, the
filters and tests they apply, the attributes of `loop`, and no attribute at all on the callable
globals (`namespace`, `cycler`, `joiner`, `lipsum`, `raise_exception`...) that lead to
`__globals__`. Underscore pieces (`'_'`, `'__'`) are flagged wherever a string is built, since a
dunder built by `~`, `join`, `replace`, `format` or a `{% set %}` block starts from one.
"""

from __future__ import annotations

import re

from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from dflash_guard.scan import rules
from dflash_guard.scan.interface import Finding, Rule, Severity

DETECTOR = "template"

# Methods real chat templates call (str, list and dict methods).
ALLOWED_METHODS = frozenset(
    {
        "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
        "replace", "upper", "lower", "title", "capitalize", "find", "rfind", "index", "count",
        "isdigit", "isspace", "isalpha", "isalnum", "join", "items", "keys", "values", "get",
        "append", "extend", "pop", "copy", "update", "removeprefix", "removesuffix", "zfill",
    }
)
ALLOWED_FILTERS = frozenset(
    {
        "trim", "tojson", "length", "count", "default", "d", "join", "upper", "lower", "title",
        "capitalize", "selectattr", "rejectattr", "select", "reject", "map", "list", "first",
        "last", "string", "int", "float", "items", "replace", "safe", "escape", "e", "indent",
        "reverse", "sort", "unique", "dictsort", "wordcount", "sum", "min", "max", "abs",
        "round", "truncate", "center", "striptags", "batch", "slice", "groupby", "dictitems",
        "bool", "tostring",
    }
)
ALLOWED_TESTS = frozenset(
    {
        "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number",
        "integer", "float", "boolean", "true", "false", "in", "eq", "ne", "equalto", "==", "!=",
        "odd", "even", "divisibleby", "lower", "upper", "sameas", "gt", "lt", "ge", "le",
        "greaterthan", "lessthan", ">", "<", ">=", "<=", "escaped",
    }
)
LOOP_ATTRIBUTES = frozenset(
    {
        "index", "index0", "first", "last", "length", "revindex", "revindex0", "previtem",
        "nextitem", "cycle", "depth", "depth0", "changed",
    }
)
# Callable globals: fine to call, never to take an attribute of (`cycler.__init__.__globals__`).
CALLABLE_GLOBALS = frozenset(
    {
        "namespace", "cycler", "joiner", "lipsum", "range", "dict", "raise_exception",
        "strftime_now", "self",
    }
)
_RISKY_NAMES = frozenset(
    {"lipsum", "self", "config", "request", "url_for", "get_flashed_messages", "__builtins__",
     "os", "globals"}
)
# Attribute names that reach interpreter internals without dunders (also as subscripts: the
# sandbox-less `getitem` falls back to attributes), and methods that run or format by name
# (attributes only: `roles['system']` is a role name, not `os.system`).
_INTERNAL_ATTRS = frozenset(
    {
        "mro", "func_globals", "f_globals", "f_locals", "f_back", "f_builtins", "gi_frame",
        "gi_code", "cr_frame", "ag_frame", "tb_frame", "tb_next", "co_code", "im_func",
        "im_class",
    }
)
_RISKY_ATTRS = _INTERNAL_ATTRS | {"popen", "system", "format", "format_map"}
_ATTRIBUTE_ARGS = frozenset({"attribute"})
_DUNDER = re.compile(r"__\w*")
_ESCAPED_UNDERSCORE = re.compile(r"\\x5f|\\u005f|\\U0000005f|\\137|&#95;|&#x5f;", re.IGNORECASE)

Problem = tuple[Rule, Severity, str]


class GenerationExtension(Extension):
    """transformers' `{% generation %}...{% endgeneration %}` tag (marks assistant tokens)."""

    tags = frozenset({"generation"})

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _environment() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", GenerationExtension],
    )


def check_template(source: str, display: str, member: str | None = None) -> list[Finding]:
    """Findings for one chat template's source text."""

    def finding(rule: Rule, severity: Severity, message: str, line: int | None) -> Finding:
        return Finding.of(
            rule, display, message, severity=severity, line=line, member=member, detector=DETECTOR
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
        tree = _environment().parse(source)
        problems = [(node, p) for node in tree.find_all(nodes.Node) for p in _node_problems(node)]
        problems += [(node, p) for node, p in _set_block_problems(tree)]
    except TemplateSyntaxError as error:
        findings.append(
            finding(
                rules.TPL_SYNTAX,
                Severity.medium,
                f"does not parse as Jinja (as transformers parses it): {error.message}",
                error.lineno,
            )
        )
        # another engine's parser may still accept it: the raw text is not left unanalysed
        for rule, severity, message in _raw_text_problems(source):
            findings.append(finding(rule, severity, f"{message} (in the unparsed text)", None))
        return findings
    except RecursionError:
        findings.append(
            finding(rules.UNSCANNABLE, Severity.high, "nested too deeply to check", None)
        )
        return findings
    for node, (rule, severity, message) in problems:
        findings.append(finding(rule, severity, message, getattr(node, "lineno", None)))
    return findings


def _node_problems(node: nodes.Node) -> list[Problem]:
    if isinstance(node, nodes.Getattr):
        return _attribute_problems(node)
    if isinstance(node, nodes.Getitem):
        return _subscript_problems(node.arg)
    if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
        method = node.node.attr
        if method not in ALLOWED_METHODS and not method.startswith("_"):
            return [(rules.TPL_UNLISTED, Severity.medium, f"calls the method {method!r}, "
                     "not one real templates use")]
    if isinstance(node, nodes.Filter):
        return _filter_problems(node)
    if isinstance(node, nodes.Test) and node.name not in ALLOWED_TESTS:
        return [(rules.TPL_UNLISTED, Severity.medium, f"uses the test {node.name!r}, "
                 "not one real templates use")]
    if isinstance(node, nodes.Name) and node.name in _RISKY_NAMES:
        return [(rules.TPL_RISKY_GLOBAL, Severity.medium,
                 f"uses the global {node.name!r}, a usual stepping stone to __globals__")]
    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        return _string_problems(node.value)
    if isinstance(node, (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        return [(rules.TPL_INCLUDE, Severity.medium, "loads another template (include/extends)")]
    return []


def _attribute_problems(node: nodes.Getattr) -> list[Problem]:
    attr = node.attr
    if attr.startswith("__"):
        return [(rules.TPL_DUNDER, Severity.critical, f"attribute access to {attr!r} "
                 "(sandbox escape shape)")]
    if attr.startswith("_") or attr in _RISKY_ATTRS:
        return [(rules.TPL_DUNDER, Severity.high, f"attribute access to {attr!r}")]
    owner = node.node
    if isinstance(owner, nodes.Name):
        if owner.name in CALLABLE_GLOBALS:
            return [(rules.TPL_RISKY_GLOBAL, Severity.high,
                     f"attribute {attr!r} of the global {owner.name!r} (a path to __globals__)")]
        if owner.name == "loop" and attr not in LOOP_ATTRIBUTES:
            return [(rules.TPL_RISKY_GLOBAL, Severity.high, f"loop.{attr} is not a loop field")]
    return []


def _subscript_problems(key: nodes.Node) -> list[Problem]:
    if isinstance(key, nodes.Const) and isinstance(key.value, str):
        if key.value.startswith("_") or key.value in _INTERNAL_ATTRS:
            return [(rules.TPL_DUNDER, Severity.critical, f"subscript access to {key.value!r} "
                     "(sandbox escape shape)")]
    elif _builds_string(key):
        return [(rules.TPL_COMPUTED_ATTR, Severity.high,
                 "subscript with a computed name (string built at render time)")]
    return []


def _filter_problems(node: nodes.Filter) -> list[Problem]:
    if node.name == "attr":
        return [(rules.TPL_ATTR_FILTER, Severity.high,
                 "|attr filter reads an attribute by a name given as data")]
    problems: list[Problem] = []
    if node.name not in ALLOWED_FILTERS:
        problems.append((rules.TPL_UNLISTED, Severity.medium,
                         f"uses the filter {node.name!r}, not one real templates use"))
    for keyword in node.kwargs:
        if keyword.key not in _ATTRIBUTE_ARGS:
            continue
        value = keyword.value
        if not (isinstance(value, nodes.Const) and isinstance(value.value, str)):
            problems.append((rules.TPL_COMPUTED_ATTR, Severity.high,
                             f"|{node.name}(attribute=...) with a name computed at render time"))
        elif "." in value.value:
            problems.append((rules.TPL_COMPUTED_ATTR, Severity.high,
                             f"|{node.name}(attribute={value.value!r}) walks a dotted path"))
    return problems


def _string_problems(value: str) -> list[Problem]:
    if match := _DUNDER.search(value):
        return [(rules.TPL_DUNDER, Severity.high, f"string constant names a dunder "
                 f"({match.group(0)})")]
    if value.strip() == "_":
        return [(rules.TPL_DUNDER, Severity.medium, "a lone '_' string: the piece dunder names "
                 "are built from")]
    return []


def _raw_text_problems(source: str) -> list[Problem]:
    problems = _string_problems(source) if _DUNDER.search(source) else []
    if re.search(r"\|\s*attr\b", source):
        problems.append((rules.TPL_ATTR_FILTER, Severity.high, "|attr filter"))
    return problems


def _set_block_problems(tree: nodes.Template) -> list[tuple[nodes.Node, Problem]]:
    """`{% set x %}__class__{% endset %}`: text captured into a variable, checked like a string."""
    found = []
    for block in tree.find_all(nodes.AssignBlock):
        for data in block.find_all(nodes.TemplateData):
            found += [(data, p) for p in _string_problems(data.data)]
    return found


def _builds_string(node: nodes.Node) -> bool:
    """Whether an expression builds a string at render time (concatenation, join, format...)."""
    if isinstance(node, (nodes.Concat, nodes.Filter, nodes.Call, nodes.Mod)):
        return True
    if isinstance(node, (nodes.Add, nodes.Mul)):
        return any(
            isinstance(c, nodes.Const) and isinstance(c.value, str)
            for c in node.find_all(nodes.Const)
        )
    return False
