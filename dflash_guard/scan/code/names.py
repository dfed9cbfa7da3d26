"""Name resolution for remote code: what a name, attribute or lookup refers to, as a dotted name.

`import os as _; f = _.popen`, `getattr(os, "popen")`, `sys.modules["os"].popen`,
`__builtins__["eval"]`, `vars(builtins)["eval"]`, `globals()["eval"]`, `__import__("os").popen`,
`importlib.import_module("os").popen` and `from os import *` followed by `popen` all resolve to
`os.popen` / `eval`, so the rules in `catalog` see one name whatever spelling was used. A chain
through a module another one re-exports (`torch.os.system`, `os.path.os.popen`) is re-rooted at
that module; `operator.attrgetter("system")(os)` is `os.system`. Bindings are flat (one table per
file, not per scope) and sticky: the visitor fills the table in a first pass over the whole file
(so a name bound below its use, or re-bound later, still resolves) and a binding to a module is
never dropped by a later assignment, which can only add findings.
"""

from __future__ import annotations

import ast

from dflash_guard.scan.code.catalog import BUILTIN_NAMES, REROOT, action
from dflash_guard.scan.code.paths import UNKNOWN, fold

GLOBALS = "<globals>"
# Lookups by key through these resolve to the key itself (a module or a builtin).
_NAMESPACES = frozenset({"sys.modules", "builtins", "builtins.__dict__", GLOBALS})
# Other spellings of the process environment.
_ENVIRON = frozenset({"os.environb", "posix.environ", "nt.environ", "os._Environ"})


def constant_str(node: ast.AST | None) -> str | None:
    """The value of a string literal, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


class Names:
    """The file's bindings: local name -> dotted name it stands for."""

    def __init__(self) -> None:
        self.bound: dict[str, str] = {}
        self.star_modules: list[str] = []
        self.modules: set[str] = set()  # local names bound to an imported module or its members
        self.constants: dict[str, str] = {}  # local names bound to a string literal

    def bind_import(self, local: str, qualified: str) -> None:
        """`import a.b as local` / `from a import b as local`."""
        self.bound[local] = qualified
        self.modules.add(local)

    def bind(self, local: str, qualified: str) -> None:
        """`local = <expression resolving to qualified>`."""
        self.bound[local] = qualified
        head = qualified.split(".")[0]
        if head in self.modules or head in ("builtins", "sys", "os"):
            self.modules.add(local)

    def is_module_rooted(self, qualified: str) -> bool:
        """Whether a resolved name starts at an imported module or the builtins."""
        head = qualified.split(".")[0]
        return bool(qualified) and (
            head in {q.split(".")[0] for q in self.bound.values()} or head in self.modules
            or head in ("builtins", "sys", "os")
            or qualified in BUILTIN_NAMES
        )

    def resolve(self, node: ast.AST) -> str:
        """The dotted name `node` refers to, '' when it is not a name-like expression."""
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if not base:
                return ""
            if node.attr == "__dict__":
                return base + ".__dict__"
            return self.normalise(f"{base}.{node.attr}")
        if isinstance(node, ast.Subscript):
            return self._lookup(self.resolve(node.value), constant_str(node.slice))
        if isinstance(node, ast.Call):
            return self._call(node)
        return ""

    def text(self, node: ast.AST | None) -> str | None:
        """The string `node` builds when every piece is known (`"sys" + "tem"`, an f-string of
        literals, a name bound to a literal), else None."""
        if node is None:
            return None
        folded = fold(node, self.resolve, constants=self.constants)
        return None if UNKNOWN in folded else folded

    def _name(self, name: str) -> str:
        if name in self.bound:
            return self.bound[name]
        if name == "__builtins__":
            return "builtins"
        for module in self.star_modules:
            candidate = f"{module}.{name}"
            if action(candidate) is not None:
                return candidate
        return name

    def _lookup(self, base: str, key: str | None) -> str:
        """`base[key]` for a namespace-like base (sys.modules, builtins, globals(), X.__dict__)."""
        if key is None or not base:
            return ""
        if base in _NAMESPACES:
            if base == "sys.modules":  # whatever it names is a module
                self.modules.add(key.split(".")[0])
            return self._name(key) if base == GLOBALS else self.normalise(key)
        if base.endswith(".__dict__"):
            return self.normalise(f"{base[: -len('.__dict__')]}.{key}")
        return ""

    def _call(self, node: ast.Call) -> str:
        if isinstance(node.func, ast.Call) and node.args:  # operator.attrgetter("a.b")(obj)
            inner = node.func
            if self.resolve(inner.func) == "operator.attrgetter" and constant_str(
                inner.args[0] if inner.args else None
            ):
                base = self.resolve(node.args[0])
                return self.normalise(f"{base}.{constant_str(inner.args[0])}") if base else ""
        func = self.resolve(node.func)
        first = node.args[0] if node.args else None
        second = self.text(node.args[1]) if len(node.args) > 1 else None
        if func == "getattr" and first is not None and second is not None:
            base = self.resolve(first)
            return self.normalise(f"{base}.{second}") if base else ""
        if func in ("__import__", "importlib.import_module") and self.text(first):
            module = self.text(first) or ""
            self.modules.add(module.split(".")[0])
            return module
        if func in ("sys.modules.get", "builtins.__dict__.get", f"{GLOBALS}.get"):
            return self._lookup(func.rsplit(".", 1)[0], constant_str(first))
        if func in ("globals", "locals"):
            return GLOBALS
        if func == "vars":
            if first is None:
                return GLOBALS
            base = self.resolve(first)
            return base + ".__dict__" if base else ""
        return ""


    def normalise(self, name: str) -> str:
        """`builtins.eval` -> `eval`; `torch.os.system` -> `os.system` (a chain from an imported
        module through a module it re-exports); `os.environb` -> `os.environ`."""
        parts = name.split(".")
        if len(parts) > 1 and self.is_module_rooted(parts[0]):
            for index in range(len(parts) - 1, 0, -1):
                if parts[index] in REROOT:
                    parts = parts[index:]
                    self.modules.add(parts[0])
                    break
        name = ".".join(parts)
        for environ in _ENVIRON:
            if name == environ or name.startswith(environ + "."):
                name = "os.environ" + name[len(environ):]
        if name.startswith("builtins.") and name.count(".") == 1:
            return name.split(".", 1)[1]
        return name
