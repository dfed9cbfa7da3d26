"""What of a folder's Python the loader runs: module top level and class bodies (import time),
the classes a loader channel names (`auto_map`, `modules.json`, `custom_pipelines`) with every
method, and whatever that code names, followed by name through every module of the folder.

The walk over-approximates: a name (a variable, an attribute, an identifier-shaped string)
reaches every function or class of that name in any module of the folder; a reached class
reaches all its methods and its bases; dynamic lookups the names cannot follow (`getattr`
with a computed name, `globals()`, `vars()`, `eval`, `exec`, `__import__`, `import_module`,
`__dict__`) make every function reached. A capability inside a function nothing reached names
cannot run when the loader imports the module and builds its classes: `scan` reports it low.
"""

from __future__ import annotations

import ast
import dataclasses
import warnings
from collections.abc import Iterable, Iterator, Mapping

from dflash_guard import rules
from dflash_guard.findings import Finding
from dflash_guard.scan.code.visitor import DETECTOR
from dflash_guard.severity import Severity

_DYNAMIC_CALLS = frozenset({"globals", "vars", "locals", "eval", "exec", "__import__",
                            "compile"})
_DYNAMIC_ATTRS = frozenset({"import_module", "__dict__", "__getattribute__", "getattr_static"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Decorators that only wrap or describe a function, never call it when applied.
_PASSIVE_DECORATORS = frozenset({"staticmethod", "classmethod", "property", "setter", "getter",
                                 "deleter", "abstractmethod", "cached_property", "wraps",
                                 "no_grad", "inference_mode", "dataclass", "lru_cache", "cache",
                                 "deprecate_kwarg", "can_return_tuple", "check_model_inputs",
                                 "auto_docstring", "use_kernel_forward_from_hub", "compile"})


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a line of a module runs: `function` is the innermost enclosing function (None at
    module level or in a class body) and whether the loader reaches it."""

    function: str | None
    reached: bool

    def describe(self) -> str:
        """The note a capability finding carries."""
        if self.function is None:
            return "the loader reaches it: it runs at import (module level or a class body)"
        if self.reached:
            return (f"the loader reaches it: `{self.function}` is named by code that runs at "
                    "import or by a class a loader channel builds")
        return (f"not reached at load: nothing the loader runs (import-time code, the classes "
                f"a loader channel builds, what they name) names `{self.function}`")


@dataclasses.dataclass
class _Def:
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    body_lines: tuple[int, int]  # first and last line of the body (after the header)


def _header_end(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    """The last line of a def's header: decorators, defaults, annotations, bases run in the
    enclosing scope, so their lines are not the body's."""
    ends = [node.lineno]
    for child in ast.iter_child_nodes(node):
        if child not in node.body:
            ends.append(int(getattr(child, "end_lineno", None) or node.lineno))
    return max(ends)


def _walk_outside_functions(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Every node of `nodes` that runs when they run: function bodies are left out (their
    headers are not), class bodies are kept."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(node, (*_FUNCTIONS, ast.Lambda)) and child in (
                    node.body if isinstance(node.body, list) else [node.body]):
                continue
            stack.append(child)


def _decorator_name(node: ast.expr) -> str:
    """`name` of `@name`, `@a.name`, `@name(...)`; "" for anything else."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _names(nodes: Iterable[ast.AST]) -> tuple[set[str], bool]:
    """The identifiers `nodes` mention and whether a lookup the walk cannot follow is there."""
    found: set[str] = set()
    dynamic = False
    for node in nodes:
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
            dynamic = dynamic or node.attr in _DYNAMIC_ATTRS
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value.isidentifier()):
            found.add(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            dynamic = dynamic or name in _DYNAMIC_CALLS or (
                name in ("getattr", "hasattr") and not (
                    len(node.args) > 1 and isinstance(node.args[1], ast.Constant)))
    return found, dynamic


class Reach:
    """The reached functions of a folder's modules (`trees`, by shown path), given the class
    names loader channels build (`entries`; None: no channel names any, so every function
    counts as reached, as whoever imports the code may call it); every function of a module in
    `whole` counts as reached (a loader calls a function of it by name: `custom_generate`)."""

    def __init__(self, trees: Mapping[str, ast.Module], entries: set[str] | None,
                 whole: frozenset[str] = frozenset()) -> None:
        self.whole = whole
        self.defs: dict[str, list[_Def]] = {}
        by_name: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]] = {}
        for shown, tree in trees.items():
            found: list[_Def] = []
            for node in ast.walk(tree):
                if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
                    found.append(_Def(node, (_header_end(node) + 1, node.end_lineno or 0)))
                    by_name.setdefault(node.name, []).append(node)
            self.defs[shown] = found
        self.reached: set[int] = set()  # id() of reached def nodes
        self.everything = entries is None
        if self.everything:
            return
        names, dynamic = _names(_walk_outside_functions(
            tree for shown, tree in trees.items() if shown not in whole))
        for shown in whole & trees.keys():
            more, found_dynamic = _names(ast.walk(trees[shown]))
            names, dynamic = names | more, dynamic or found_dynamic
        names |= set(entries or ())
        for tree in trees.values():
            # the module's own `__getattr__`/`__dir__` run on attribute access (PEP 562)
            names |= {n.name for n in tree.body if isinstance(n, _FUNCTIONS)
                      and n.name.startswith("__")}
        for defs in by_name.values():  # a decorator gets the function and may call it
            names |= {n.name for n in defs if any(_decorator_name(d) not in _PASSIVE_DECORATORS
                              for d in n.decorator_list)}
        seen: set[str] = set()
        while names and not dynamic:
            name = names.pop()
            seen.add(name)
            for node in by_name.get(name, []):
                if id(node) in self.reached:
                    continue
                inside = list(ast.walk(node))  # a reached class: all its methods, its bases
                self.reached.update(id(n) for n in inside
                                    if isinstance(n, (*_FUNCTIONS, ast.ClassDef)))
                more, found_dynamic = _names(inside)
                dynamic = dynamic or found_dynamic
                names |= more - seen
        self.everything = dynamic

    def place(self, shown: str, line: int | None) -> Place:
        """Where `line` of module `shown` runs (None: the whole file, module level)."""
        inner: _Def | None = None
        for entry in self.defs.get(shown, []):
            first, last = entry.body_lines
            if isinstance(entry.node, ast.ClassDef) or line is None or not first <= line <= last:
                continue
            if inner is None or entry.body_lines[0] >= inner.body_lines[0]:
                inner = entry
        if inner is None:
            return Place(None, True)
        assert not isinstance(inner.node, ast.ClassDef)
        return Place(inner.node.name, self.everything or shown in self.whole
                     or id(inner.node) in self.reached)


def place_findings(findings: list[Finding], sources: Mapping[str, bytes],
                   entries: set[str] | None, whole: frozenset[str] = frozenset()
                   ) -> list[Finding]:
    """`findings` with each capability finding of the modules `sources` (shown path -> source)
    saying whether the loader reaches it (`Reach`); unreached ones are lowered to low."""
    trees: dict[str, ast.Module] = {}
    for shown, source in sources.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trees[shown] = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError, SystemError):
            entries = None  # a module nobody can read: whatever it names, all counts as reached
    try:
        reach = Reach(trees, entries, whole)
    except RecursionError:
        reach = Reach({}, None)
    placed = []
    for finding in findings:
        if finding.file not in sources or finding.detector != DETECTOR or finding.rule_id in (
                rules.RC_UNPARSEABLE.id, rules.RC_UNREVIEWED.id):
            placed.append(finding)
            continue
        where = reach.place(finding.file, finding.line)
        severity = finding.severity if where.reached else Severity.low
        placed.append(dataclasses.replace(finding, severity=severity,
                                          message=f"{finding.message} ({where.describe()})"))
    return placed
