"""Chat templates: checked against a grammar with Jinja's own parser, then, when the grammar
passes, for cost, exfiltration and injected text by a trial render under the render budget
(`cost`); a template outside the grammar is never rendered.

A template passes only when every node of its syntax tree is inside the subset real chat
templates use (`ALLOWED_NODES`: output, loops, conditions, set, macros, filter blocks, the
operators they use), every call is a method, a macro it defines or a known global, and every
filter, test and method is one real templates apply; any other construct is DG-TPL-UNLISTED
(high), wherever the template sits (GGUF metadata, tokenizer_config, named templates, `.jinja`).
The subset was measured on the 71 templates of the pinned llama.cpp tree (all pass).

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

from dflash_guard import rules
from dflash_guard.findings import Finding
from dflash_guard.rules import Rule
from dflash_guard.severity import Severity

DETECTOR = "template"

# Methods real chat templates call (str, list and dict methods).
ALLOWED_METHODS = frozenset(
    {
        "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
        "replace", "upper", "lower", "title", "capitalize", "find", "rfind", "index", "count",
        "isdigit", "isspace", "isalpha", "isalnum", "join", "items", "keys", "values", "get",
        "append", "extend", "pop", "copy", "update", "removeprefix", "removesuffix", "zfill",
        "format",
    }
)
ALLOWED_FILTERS = frozenset(
    {
        "trim", "tojson", "length", "count", "default", "d", "join", "upper", "lower", "title",
        "capitalize", "selectattr", "rejectattr", "select", "reject", "map", "list", "first",
        "last", "string", "int", "float", "items", "replace", "safe", "escape", "e", "indent",
        "reverse", "sort", "unique", "dictsort", "wordcount", "sum", "min", "max", "abs",
        "round", "truncate", "center", "striptags", "batch", "slice", "groupby", "dictitems",
        "bool", "tostring", "from_json",
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
# The syntax-tree nodes of the subset real chat templates use; any other is a finding.
ALLOWED_NODES = frozenset(
    {
        nodes.Template, nodes.Output, nodes.TemplateData, nodes.For, nodes.If, nodes.Assign,
        nodes.AssignBlock, nodes.Macro, nodes.CallBlock, nodes.FilterBlock, nodes.Scope,
        nodes.Break,
        nodes.Continue, nodes.Name, nodes.NSRef, nodes.Const, nodes.List, nodes.Tuple,
        nodes.Dict, nodes.Pair, nodes.Keyword, nodes.Getattr, nodes.Getitem, nodes.Slice,
        nodes.Call, nodes.Filter, nodes.Test, nodes.CondExpr, nodes.And, nodes.Or, nodes.Not,
        nodes.Neg, nodes.Pos, nodes.Compare, nodes.Operand, nodes.Add, nodes.Sub, nodes.Mul,
        nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.Concat,
    }
)
# `{0.attr}` or `{0[key]}` in a format string reads attributes by name: not allowed.
_FORMAT_FIELD_ACCESS = re.compile(r"\{[^{}]*[.\[][^{}]*\}")
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
_RISKY_ATTRS = _INTERNAL_ATTRS | {"popen", "system", "format_map"}
_ATTRIBUTE_ARGS = frozenset({"attribute"})
_DUNDER = re.compile(r"__\w*")
_ESCAPED_UNDERSCORE = re.compile(r"\\x5f|\\u005f|\\U0000005f|\\137|&#95;|&#x5f;", re.IGNORECASE)

Problem = tuple[Rule, Severity, str]


class GenerationExtension(Extension):
    """transformers' `{% generation %}...{% endgeneration %}` tag (marks assistant tokens)."""

    tags = {"generation"}  # jinja2 declares `tags` a set

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


def review_findings(source: str, display: str, member: str | None,
                    reviewed: frozenset[str]) -> list[Finding]:
    """The unreviewed-template finding (low) when the template is neither a published one of
    the catalog (`known.json`) nor in `reviewed` (the policy's `reviewed_templates`)."""
    from dflash_guard.templates.cost import is_known, template_sha256

    digest = template_sha256(source)
    if is_known(source) or digest in reviewed:
        return []
    return [Finding.of(rules.TPL_UNREVIEWED, display,
                       f"chat template not reviewed (sha256 {digest}): not a published template "
                       "of the catalog nor on the policy's reviewed_templates; a tier with "
                       "`templates: reviewed-only` refuses it (`dflash-guard review` lists it)",
                       member=member, detector=DETECTOR)]


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
        callables = _callables(tree)
        macros = {m.name for m in tree.find_all(nodes.Macro)}
        problems = [(node, p) for node in tree.find_all(nodes.Node)
                    for p in _grammar_problems(node, callables, macros) + _node_problems(node)]
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
    if not any(severity >= Severity.high for _, (_, severity, _) in problems):
        from dflash_guard.templates.cost import cost_problems  # renders, under the budget

        for rule, severity, message in cost_problems(source, tree):
            findings.append(finding(rule, severity, message, None))
    return findings


def _callables(tree: nodes.Template) -> set[str]:
    """Names a template may call: known globals, its macros, `caller`, and names it set to what
    a callable global returns (`{% set sep = joiner(', ') %}` then `sep()`)."""
    names = set(CALLABLE_GLOBALS) | {"caller"} | {m.name for m in tree.find_all(nodes.Macro)}
    for assign in tree.find_all(nodes.Assign):
        value = assign.node
        if (isinstance(assign.target, nodes.Name) and isinstance(value, nodes.Call)
                and isinstance(value.node, nodes.Name) and value.node.name in CALLABLE_GLOBALS):
            names.add(assign.target.name)
    return names


def _grammar_problems(node: nodes.Node, callables: set[str], macros: set[str]) -> list[Problem]:
    """Whether `node` is inside the subset: its kind, what a call calls, and that a
    `{% call %}` block hands its `caller` to a macro of the template, nothing else."""
    if type(node) not in ALLOWED_NODES:
        return [(rules.TPL_UNLISTED, Severity.high, f"uses the construct {type(node).__name__}, "
                 "outside the subset real chat templates use")]
    if isinstance(node, nodes.CallBlock) and not (
            isinstance(node.call.node, nodes.Name) and node.call.node.name in macros):
        return [(rules.TPL_UNLISTED, Severity.high, "a {% call %} block that calls something "
                 "other than a macro of the template (it would be handed `caller`)")]
    if not isinstance(node, nodes.Call):
        return []
    callee = node.node
    if isinstance(callee, nodes.Name) and callee.name not in callables:
        return [(rules.TPL_UNLISTED, Severity.high, f"calls {callee.name!r}, which is neither a "
                 "macro of the template nor a global real templates call")]
    if isinstance(callee, nodes.Getattr) and callee.attr == "format" and not (
        isinstance(callee.node, nodes.Const) and isinstance(callee.node.value, str)
        and not _FORMAT_FIELD_ACCESS.search(callee.node.value)
    ):
        return [(rules.TPL_COMPUTED_ATTR, Severity.high, ".format on something other than a "
                 "literal string of plain fields (format fields read attributes by name)")]
    if not isinstance(callee, (nodes.Name, nodes.Getattr)):
        return [(rules.TPL_UNLISTED, Severity.high, f"calls a {type(callee).__name__} "
                 "expression, not a method, macro or known global")]
    return []


def _node_problems(node: nodes.Node) -> list[Problem]:
    if isinstance(node, nodes.Getattr):
        return _attribute_problems(node)
    if isinstance(node, nodes.Getitem):
        return _subscript_problems(node.arg)
    if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
        method = node.node.attr
        if method not in ALLOWED_METHODS and not method.startswith("_"):
            return [(rules.TPL_UNLISTED, Severity.high, f"calls the method {method!r}, "
                     "not one real templates use")]
    if isinstance(node, nodes.Filter):
        return _filter_problems(node)
    if isinstance(node, nodes.Test) and node.name not in ALLOWED_TESTS:
        return [(rules.TPL_UNLISTED, Severity.high, f"uses the test {node.name!r}, "
                 "not one real templates use")]
    if isinstance(node, nodes.Name) and node.name in _RISKY_NAMES:
        return [(rules.TPL_RISKY_GLOBAL, Severity.medium,
                 f"uses the global {node.name!r}, a usual stepping stone to __globals__")]
    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        return _string_problems(node.value)
    if isinstance(node, (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        return [(rules.TPL_INCLUDE, Severity.high, "loads another template (include/extends)")]
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
        problems.append((rules.TPL_UNLISTED, Severity.high,
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
        return [(rules.TPL_DUNDER, Severity.low, "a lone '_' string (as in replace('-', '_')); "
                 "a dunder built from it needs a computed subscript or |attr, both high")]
    return []


def _raw_text_problems(source: str) -> list[Problem]:
    problems = _string_problems(source) if _DUNDER.search(source) else []
    if re.search(r"\|\s*attr\b", source):
        problems.append((rules.TPL_ATTR_FILTER, Severity.high, "|attr filter"))
    return problems


def _set_block_problems(tree: nodes.Template) -> list[tuple[nodes.Node, Problem]]:
    """`{% set x %}__class__{% endset %}`: text captured into a variable, checked like a string."""
    found: list[tuple[nodes.Node, Problem]] = []
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
