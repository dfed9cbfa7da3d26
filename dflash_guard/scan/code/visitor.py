"""The `ast` walk over one Python file: resolves names (`names`), asks `catalog` what each call,
reference and import means, and records findings with the context that decides severity
(import time or not, a save-time method or a load path).
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Sequence

from dflash_guard import rules
from dflash_guard.findings import Finding
from dflash_guard.rules import Rule
from dflash_guard.scan.code import catalog
from dflash_guard.scan.code.capabilities import RULE_LABELS, Capability
from dflash_guard.scan.code.names import GLOBALS, Names, constant_str
from dflash_guard.scan.code.paths import UNKNOWN, fold, is_outside
from dflash_guard.severity import Severity

DETECTOR = "remote-code"
IMPORT_TIME = ("module level", "class body", "default argument", "decorator", "class hook",
               "annotation")
# Methods Python runs when a class statement executes (at import time for module-level classes).
_CLASS_HOOKS = frozenset({"__init_subclass__", "__set_name__", "__class_getitem__", "__prepare__"})
_METACLASS_HOOKS = frozenset({"__new__", "__init__", "__call__", "__prepare__"})
# Module-level calls that realistic modeling code makes and that do nothing outside the module.
_USUAL_MODULE_CALLS = frozenset(
    {"getLogger", "get_logger", "TypeVar", "namedtuple", "NewType", "dataclass", "field", "wrap",
     "filterwarnings", "simplefilter", "warn", "register", "register_buffer", "is_torch_available",
     "is_flash_attn_available", "is_flash_attn_2_available", "is_torch_fx_available",
     "is_torchdynamo_compiling", "require_version", "replace_return_docstrings",
     "add_start_docstrings", "frozenset", "set", "dict", "list", "tuple", "ModuleList",
     "ParameterDict", "compile_regex", "Enum", "getenv_bool", "object_hook", "get_module_logger"}
)
_ENV_READERS = frozenset({"os.environ.get", "os.getenv", "os.getenvb", "os.environ.pop",
                          "os.environ.setdefault"})
# Functions that take a module as an argument without handing it on (their own rules apply).
_MODULE_INSPECTORS = frozenset({"getattr", "hasattr", "setattr", "delattr", "vars", "dir",
                                "isinstance", "id", "repr", "str", "print", "type"})
# Calls that change a namespace in place (`globals().update(vars(os))`).
_NAMESPACE_WRITERS = frozenset({"update", "setdefault", "__setitem__", "__delitem__", "pop",
                                "popitem", "clear", "__ior__"})
_OPENERS = frozenset({"open", "io.open", "os.fdopen", "codecs.open", "gzip.open", "bz2.open",
                      "lzma.open", "io.FileIO", "tarfile.open", "zipfile.ZipFile", "shelve.open"})
_MODE = ("r", "w", "a", "x", "b", "t", "+")
MAX_LITERAL_DEPTH = 3
# Loaders whose keyword decides whether they unpickle: name -> (keyword, its position, whether
# the value that keeps them from unpickling is True). torch/serialization.py load(f,
# map_location, pickle_module, *, weights_only); numpy/lib/_npyio_impl.py load(file, mmap_mode,
# allow_pickle); numpy/lib/format.py read_array(fp, allow_pickle).
_PICKLE_SWITCHES = {
    "torch.load": ("weights_only", 99, True),
    "torch.serialization.load": ("weights_only", 99, True),
    "numpy.load": ("allow_pickle", 2, False),
    "numpy.lib.npyio.load": ("allow_pickle", 2, False),
    "numpy.lib.format.read_array": ("allow_pickle", 1, False),
    "numpy.lib.npyio.NpzFile": ("allow_pickle", 2, False),
}
# A message that already names its capability (a catalog entry's) is not labelled again.
_LABELS = tuple(f"{c.value}" for c in Capability) + tuple(f"{v}:" for v in RULE_LABELS.values())


class Visitor(ast.NodeVisitor):
    """Collects the findings of one file; `depth` counts `eval`/`exec` literals analysed inside."""

    def __init__(self, display: str, depth: int = 0, line_offset: int = 0,
                 names: Names | None = None) -> None:
        self.display = display
        self.depth = depth
        self.line_offset = line_offset
        self.findings: list[Finding] = []
        self.names = names or Names()
        self.parents: dict[int, ast.AST] = {}
        self.context: list[str] = ["module level"]
        self.functions: list[str] = []
        self.metaclass = False
        self.constant_loop_names: set[str] = set()
        self.handled: set[int] = set()  # nodes already judged by their parent (ids)

    # -- bookkeeping ---------------------------------------------------------------------------
    def add(
        self, rule: Rule, severity: Severity, node: ast.AST, message: str, *, runs: bool = False
    ) -> None:
        """Record a finding; an action (`runs`) at import time is also an import-time finding."""
        where = self.context[-1]
        label = RULE_LABELS.get(rule.id)
        if label is not None and not message.startswith(_LABELS):
            message = f"{label}: {message}"
        line = getattr(node, "lineno", None)
        line = line + self.line_offset if line is not None else None
        if rule is rules.RC_FS_WRITE and self.in_save_method():
            severity = Severity.low
            message += f" (inside {self.functions[-1]}(), which runs only when saving)"
        self.findings.append(
            Finding.of(rule, self.display, message, severity=severity, line=line, detector=DETECTOR)
        )
        if runs and where in IMPORT_TIME and severity >= Severity.low:
            raised = Severity(min(severity + 1, Severity.critical))
            self.findings.append(
                Finding.of(
                    rules.RC_IMPORT_TIME_SIDE_EFFECT, self.display,
                    f"runs at import time ({where}): {message}",
                    severity=raised, line=line, detector=DETECTOR,
                )
            )

    def in_save_method(self) -> bool:
        return any(catalog.SAVE_METHODS.match(name) for name in self.functions)

    def in_context(self, label: str, nodes: Sequence[ast.AST]) -> None:
        self.context.append(label)
        for node in nodes:
            self.visit(node)
        self.context.pop()

    def visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.parents[id(child)] = node
        super().visit(node)

    # -- scopes --------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.in_context("decorator", node.decorator_list)
        defaults = [d for d in node.args.defaults + node.args.kw_defaults if d is not None]
        self.in_context("default argument", defaults)
        arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                     node.args.vararg, node.args.kwarg]
        self.annotations([a.annotation for a in arguments if a is not None] + [node.returns])
        hook = node.name in _CLASS_HOOKS or (self.metaclass and node.name in _METACLASS_HOOKS)
        self.functions.append(node.name)
        self.in_context("class hook" if hook else "function body", node.body)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        defaults = [d for d in node.args.defaults + node.args.kw_defaults if d is not None]
        self.in_context("default argument", defaults)
        self.in_context("function body", [node.body])

    def annotations(self, nodes: list[ast.expr | None]) -> None:
        """Annotations run when the `def` runs; a string one runs when something resolves type
        hints (`typing.get_type_hints`): it is parsed and checked like code."""
        for node in nodes:
            text = constant_str(node)
            checked: ast.AST | None = node
            if text is not None and self.depth < MAX_LITERAL_DEPTH:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        checked = ast.parse(text.strip(), mode="eval")
                except (SyntaxError, ValueError, RecursionError, MemoryError, SystemError):
                    continue  # a plain string: nothing would evaluate it
            if checked is not None:
                self.in_context("annotation", [checked])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.in_context("decorator", node.decorator_list)
        self.in_context(self.context[-1], node.bases + [k.value for k in node.keywords])
        bases = {self.names.resolve(b) for b in node.bases}
        outer, self.metaclass = self.metaclass, bool(bases & {"type", "abc.ABCMeta", "ABCMeta"})
        if any(k.arg == "metaclass" for k in node.keywords):
            self.metaclass = False  # a class *using* a metaclass; its hooks are checked there
        self.in_context("class body", node.body)
        self.metaclass = outer

    # -- imports -------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            local = alias.asname or alias.name.split(".")[0]
            self.names.bind_import(local, alias.name if alias.asname else local)
            self.check_module(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            if node.level:
                continue  # the package's own files: scanned as files of the folder
            if alias.name == "*":
                self.names.star_modules.append(module)
                self.names.modules.add(module.split(".")[0])
                if module.split(".")[0] not in ("torch", "transformers", "typing"):
                    self.add(rules.RC_UNUSUAL_IMPORT, Severity.low, node,
                             f"from {module} import *: hides which names the file uses")
                continue
            self.names.bind_import(alias.asname or alias.name, f"{module}.{alias.name}")
        if not node.level:
            self.check_module(module, node)

    def check_module(self, name: str, node: ast.AST) -> None:
        root = name.split(".")[0]
        if name.startswith(catalog.PURE_SUBMODULES):
            return
        if root in catalog.PROCESS_MODULES:
            self.add(rules.RC_PROCESS, Severity.high, node, f"imports {name} (runs processes)")
        elif root in catalog.NETWORK_MODULES:
            self.add(rules.RC_NETWORK, Severity.high, node, f"imports {name} (network access)")
        elif root in catalog.DYNAMIC_MODULES:
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                     f"imports {name} (loads or runs code dynamically)")
        elif root and root not in catalog.ALLOWED_IMPORTS:
            self.add(rules.RC_UNUSUAL_IMPORT, Severity.low, node,
                     f"imports {name}, outside the modules model code uses")

    # -- bindings ------------------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.bind(target, node.value)
            self.check_store(target, node.value)
            self.check_loader_switch(target, node.value)
            self.visit(target)
        self.visit(node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.check_store(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.check_store(target)
        self.generic_visit(node)

    def check_loader_switch(self, target: ast.AST, value: ast.AST) -> None:
        """`kwargs["trust_remote_code"] = True`, handed to a loader later."""
        key = constant_str(target.slice) if isinstance(target, ast.Subscript) else None
        if key in ("trust_remote_code", "custom_pipelines") and not (
            isinstance(value, ast.Constant) and value.value in (False, None)
        ):
            self.add(rules.RC_NESTED_REMOTE_CODE, Severity.high, target,
                     f"sets {key} for a loader: runs another repository's code")

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.annotations([node.annotation])
        if node.value is not None:
            self.bind(node.target, node.value)
            self.visit(node.value)
        self.check_store(node.target, node.value)
        self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.bind(node.target, node.value)
        self.visit(node.value)

    def bind(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            for t, v in zip(target.elts, value.elts, strict=False):
                self.bind(t, v)
        elif isinstance(target, ast.Name):
            if (text := constant_str(value)) is not None:
                self.names.constants.setdefault(target.id, text)  # sticky, like the modules
            resolved = self.names.resolve(value)
            if resolved and self.names.is_module_rooted(resolved):
                self.names.bind(target.id, resolved)
            # a later non-module value does not unbind: bindings are sticky (see names.py)

    def check_store(self, target: ast.AST, value: ast.AST | None = None) -> None:
        """Assignments into modules or namespaces (monkey-patching, sys.modules, os.environ)."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.check_store(element)
            return
        if isinstance(target, ast.Starred):
            self.check_store(target.value)
            return
        # only the stored-into node counts: in `os.environ[K] = v`, `os.environ` is only read
        for node in [target] if isinstance(target, (ast.Attribute, ast.Subscript)) else []:
            base = self.names.resolve(node.value)
            if base == "os.environ":
                self.environment_key(node, writes=True)
            elif isinstance(node, ast.Attribute) and catalog.SETTINGS.search(base) and _literal(
                value
            ):
                self.add(rules.RC_MONKEY_PATCH, Severity.low, node, f"sets the setting {base}")
            elif base in ("sys.modules", "builtins", "builtins.__dict__", GLOBALS) or (
                base and base.split(".")[0] in self.names.modules | {"builtins", "sys"}
                and base != "os.environ"
            ):
                self.add(rules.RC_MONKEY_PATCH, Severity.high, node,
                         f"assigns into {base} (changes code other modules run)", runs=True)

    def visit_For(self, node: ast.For | ast.AsyncFor | ast.comprehension) -> None:
        values = node.iter.elts if isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)) else []
        if isinstance(node.target, ast.Name) and values and all(constant_str(v) for v in values):
            self.constant_loop_names.add(node.target.id)
        self.generic_visit(node)

    visit_AsyncFor = visit_For
    visit_comprehension = visit_For

    # -- expressions ---------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        self.handled.add(id(node.func))
        name = self.names.resolve(node.func)
        self.check_call(node, name)
        self.check_keywords(node, name)
        if id(node) not in self.handled:
            self.check_value(node)  # getattr(os, "system") handed on without a call
        self.generic_visit(node)

    def check_call(self, node: ast.Call, name: str) -> None:
        if not name and isinstance(node.func, ast.Attribute):  # Path(...).write_text(...)
            name = f"?.{node.func.attr}"
        last = name.rsplit(".", 1)[-1]
        self.check_paths(node, name)
        if self.namespace_write(node, name, last):
            return
        if name in ("eval", "exec", "compile") and node.args and constant_str(node.args[0]):
            self.literal_code(node, name, constant_str(node.args[0]) or "")
        elif name in _ENV_READERS:
            self.environment_key(node, writes=name.endswith(("pop", "setdefault")))
        elif name == "getattr":
            self.check_getattr(node)
        elif (name in ("setattr", "delattr") or last in ("__setattr__", "__delattr__")
              ) and node.args:
            base = self.names.resolve(node.args[0])
            if base and base.split(".")[0] in self.names.modules | {"builtins", "sys"}:
                self.add(rules.RC_MONKEY_PATCH, Severity.high, node,
                         f"{name}() on {base} (changes code other modules run)", runs=True)
            if len(node.args) > 2:
                self.check_loader_switch(ast.Subscript(value=node.args[0], slice=node.args[1]),
                                         node.args[2])
        elif name in ("operator.attrgetter", "operator.methodcaller") and node.args:
            attr = constant_str(node.args[0])
            if attr is None or any(catalog.dangerous_attribute(a) for a in attr.split(".")):
                self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                         f"{Capability.dynamic_attribute.value}: "
                         f"{name}({attr or 'a computed name'!s})", runs=True)
        elif (name in _OPENERS or last == "open") and self.write_mode(node):
            severity, message = self.write_target(node)
            self.add(rules.RC_FS_WRITE, severity, node, message, runs=True)
        elif (hit := self.action(name, node)) is not None:
            rule, severity, message = hit
            if name in catalog.CODE_SINKS and self.carries_decoded(node):
                rule, severity = rules.RC_ENCODED_BLOB, Severity.critical
                message += " on decoded data (a hidden payload)"
            self.add(rule, severity, node, message, runs=True)
        elif self.context[-1] == "module level" and last not in _USUAL_MODULE_CALLS:
            self.add(rules.RC_IMPORT_TIME_SIDE_EFFECT, Severity.low, node,
                     f"calls {name or 'an expression'}() at import time")

    def literal_code(self, node: ast.Call, name: str, source: str) -> None:
        """`eval("...")` of a literal is visible code: analyse the literal instead."""
        if self.depth >= MAX_LITERAL_DEPTH:
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node, f"{name}() nested too deeply")
            return
        mode = "eval" if name == "eval" else "exec"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(source, mode=mode)
        except (SyntaxError, ValueError, RecursionError, MemoryError, SystemError):
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                     f"{name}() of a literal that does not parse")
            return
        inner = Visitor(self.display, self.depth + 1, (node.lineno or 1) - 1 + self.line_offset)
        inner.context = list(self.context)
        inner.names = self.names
        inner.visit(tree)
        self.findings += inner.findings
        self.add(rules.RC_DYNAMIC_CODE, Severity.low, node,
                 f"{name}() of a string literal (analysed as code)")

    def carries_decoded(self, node: ast.Call) -> bool:
        return any(
            isinstance(inner, ast.Call) and catalog.is_decoder(self.names.resolve(inner.func))
            for arg in [*node.args, *(k.value for k in node.keywords)]
            for inner in ast.walk(arg)
        )

    def check_getattr(self, node: ast.Call) -> None:
        known = self.names.text(node.args[1]) if len(node.args) >= 2 else None
        if known in catalog.INTROSPECTION:
            self.introspection(node, known or "")
        if len(node.args) < 2 or known is not None:
            return  # a name built of literals resolves like an attribute (see Names.resolve)
        key = node.args[1]
        if isinstance(key, ast.Name) and key.id in self.constant_loop_names:
            return
        target = self.names.resolve(node.args[0])
        if not target or not (
            target.split(".")[0] in self.names.modules or target in ("builtins", GLOBALS)
        ):
            return
        used = id(node) in self.handled or isinstance(self.parents.get(id(node)), ast.Attribute)
        if target in catalog.DATA_MODULES and not used:
            return  # getattr(torch, config.torch_dtype), getattr(operator, op): data, not code
        self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                 f"{Capability.dynamic_attribute.value}: getattr() with a computed name on "
                 f"{target} reaches any of its functions", runs=True)

    def check_keywords(self, node: ast.Call, name: str) -> None:
        """Loader switches: another repo's remote code, or unpickling a file of the folder."""
        if name in _PICKLE_SWITCHES:
            self.check_unpickling(node, name)
        for keyword in node.keywords:
            if keyword.arg in ("trust_remote_code", "custom_pipelines") and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value in (False, None)
            ):
                self.add(rules.RC_NESTED_REMOTE_CODE, Severity.high, node,
                         f"passes {keyword.arg}= to a loader: runs another repository's code")

    def check_unpickling(self, node: ast.Call, name: str) -> None:
        """`torch.load` and `numpy.load` unpickle unless their switch says not to: a switch
        set to unpickle, or computed, is high; `torch.load` without `weights_only` is low (its
        default is weights only from torch 2.6, a pickle before)."""
        switch, position, safe = _PICKLE_SWITCHES[name]
        given = next((k.value for k in node.keywords if k.arg == switch), None)
        if given is None and len(node.args) > position:
            given = node.args[position]
        label = "load code or pickles"
        if any(k.arg == "pickle_module" for k in node.keywords):
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                     f"{label}: {name}(pickle_module=...) unpickles with a module of its own",
                     runs=True)
        if given is None:
            if safe:
                self.add(rules.RC_DYNAMIC_CODE, Severity.low, node,
                         f"{label}: {name}() without {switch}=True loads weights only under "
                         "torch >= 2.6 (the default), a pickle before", runs=True)
        elif not isinstance(given, ast.Constant):
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                     f"{label}: {name}({switch}=<computed>) may unpickle, which runs code",
                     runs=True)
        elif bool(given.value) is not safe:
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                     f"{label}: {name}({switch}={given.value!s}) unpickles, which runs code",
                     runs=True)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=False):
            if constant_str(key) in ("trust_remote_code", "custom_pipelines") and not (
                isinstance(value, ast.Constant) and value.value in (False, None)
            ):
                self.add(rules.RC_NESTED_REMOTE_CODE, Severity.high, node,
                         f"sets {constant_str(key)} for a loader: runs another repository's code")
        self.generic_visit(node)

    def environment_key(self, node: ast.AST, *, writes: bool) -> None:
        """`os.environ[K]`, `os.environ.get(K)`, `os.getenv(K)`: judged by the name K."""
        if isinstance(node, ast.Call):
            key_node = node.args[0] if node.args else None
            self.handled.add(id(getattr(node.func, "value", None)))
        else:
            key_node = node.slice if isinstance(node, ast.Subscript) else None
            self.handled.add(id(getattr(node, "value", None)))
        key = constant_str(key_node)
        verb = "sets" if writes else "reads"
        if key is None:
            self.add(rules.RC_CREDENTIALS, Severity.high, node,
                     f"{verb} an environment variable named at run time", runs=True)
        elif catalog.CREDENTIAL_ENV.search(key):
            self.add(rules.RC_CREDENTIALS, Severity.high, node,
                     f"{verb} the credential variable {key}", runs=True)
        elif writes:
            self.add(rules.RC_MONKEY_PATCH, Severity.low, node, f"sets the environment {key}")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.handled.add(id(node.value))  # the container is read, not handed on
        base = self.names.resolve(node.value)
        if base == "os.environ" and isinstance(node.ctx, ast.Load):
            self.environment_key(node, writes=False)
        elif (base in ("sys.modules", "builtins", "builtins.__dict__", GLOBALS)
              or base.endswith(".__dict__")) and constant_str(node.slice) is None:
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                     f"{Capability.dynamic_attribute.value}: looks up {base} by a computed key",
                     runs=True)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for comparator in node.comparators:
            if self.names.resolve(comparator) == "os.environ":
                self.handled.add(id(comparator))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "__builtins__":
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node, "uses __builtins__ directly")
        elif isinstance(node.ctx, ast.Load):
            self.check_value(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in catalog.INTROSPECTION:
            self.introspection(node, node.attr)
        if isinstance(node.ctx, ast.Load):
            self.check_value(node)
        if self.names.resolve(node.value) != "os.environ":
            self.handled.add(id(node.value))  # `os.path`: os is used, not handed on
        self.generic_visit(node)

    def introspection(self, node: ast.AST, attr: str) -> None:
        self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                 f"reads {attr}, which reaches globals, code objects or every class", runs=True)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not isinstance(self.parents.get(id(node)), ast.BinOp):  # the whole expression once
            self.check_path(node, fold(node, self.names.resolve, constants=self.names.constants))
        self.generic_visit(node)

    def check_paths(self, node: ast.Call, name: str) -> None:
        """Credential and start-up files named through pieces, and savers writing outside."""
        pieces = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(node.func, ast.Attribute):
            pieces.append(node.func.value)
        folded = [fold(piece, self.names.resolve, constants=self.names.constants)
                  for piece in pieces]
        for path in folded:
            self.check_path(node, path)
        if name.rsplit(".", 1)[-1] in catalog.SAVERS and not self.in_save_method():
            for path in folded:
                if is_outside(path):
                    self.add(rules.RC_FS_WRITE, Severity.high, node,
                             f"{name}() writes {path[:80]!r}, outside the working folder",
                             runs=True)

    def check_path(self, node: ast.AST, path: str) -> None:
        if (match := catalog.CREDENTIAL_PATHS.search(path)) is not None:
            self.add(rules.RC_CREDENTIALS, Severity.high, node,
                     f"names a credential file: {match.group(0)} (in {path[:80]!r})")
        elif catalog.SITE_PACKAGES.search(path):
            self.add(rules.RC_FS_WRITE, Severity.high, node,
                     f"names the interpreter's start-up files: {path[:60]!r}")

    def namespace_write(self, node: ast.Call, name: str, last: str) -> bool:
        """`globals().update(...)`, `sys.modules.update(...)`, `torch.__dict__.update(...)`."""
        if last not in _NAMESPACE_WRITERS or not isinstance(node.func, ast.Attribute):
            return False
        base = self.names.resolve(node.func.value)
        namespace = base in ("sys.modules", "builtins", "builtins.__dict__", GLOBALS) or (
            base.endswith(".__dict__") and (base in (f"{GLOBALS}.__dict__",) or
                                            base.split(".")[0] in self.names.modules | {"sys"})
        )
        if not namespace:
            return False
        self.add(rules.RC_MONKEY_PATCH, Severity.high, node,
                 f"{last}() on {base} (changes names other code resolves)", runs=True)
        return True

    def check_value(self, node: ast.AST) -> None:
        """A dangerous callable referenced without being called: passed on, stored, aliased."""
        if id(node) in self.handled:
            return
        name = self.names.resolve(node)
        if name == "os.environ":
            self.add(rules.RC_CREDENTIALS, Severity.high, node, "reads the whole os.environ",
                     runs=True)
            return
        if self.escapes(node, name):
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node,
                     f"hands the {name} namespace on as a value, out of reach of the name rules",
                     runs=True)
            return
        hit = self.action(name)
        if hit is not None and hit[1] >= Severity.high:
            rule, severity, message = hit
            self.add(rule, Severity.high, node, f"refers to {name} as a value ({message})",
                     runs=self.context[-1] == "decorator")  # a decorator is called

    def action(self, name: str, call: ast.Call | None = None) -> catalog.Action | None:
        """`catalog.action`, where a dotted name that does not start at an imported module (a
        local such as `code.append`) is judged by its last part only (`x.write_text`)."""
        if call is not None:  # arguments folded to the strings they build (for `When`)
            call = ast.Call(func=call.func, args=[self.folded(a) for a in call.args],
                            keywords=[ast.keyword(arg=k.arg, value=self.folded(k.value))
                                      for k in call.keywords])
        if "." in name and not name.startswith("?.") and not self.names.is_module_rooted(name):
            return catalog.action("?." + name.rsplit(".", 1)[-1], call)
        return catalog.action(name, call)

    def folded(self, node: ast.expr) -> ast.expr:
        """A string-building argument (`BASE + "/x"`, an f-string, a name bound to a literal)
        as the literal it folds to; any other argument as it is."""
        if isinstance(node, (ast.Constant, ast.Starred)):
            return node
        text = fold(node, self.names.resolve, constants=self.names.constants)
        return node if text == UNKNOWN else ast.Constant(value=text)

    def escapes(self, node: ast.AST, name: str) -> bool:
        """A capability module or namespace used as a value (stored, returned, passed...)."""
        if not (name in catalog.CAPABILITY_MODULES or name in ("sys.modules", GLOBALS) or (
            name.endswith(".__dict__") and name.split(".")[0] in self.names.modules
        )):
            return False
        if isinstance(node, ast.Name) and name == node.id and node.id not in self.names.modules:
            return False  # a local that merely shares a module's name
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Call) and node in parent.args:
            return self.names.resolve(parent.func) not in _MODULE_INSPECTORS
        return not isinstance(parent, (ast.Compare, ast.Expr))

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.check_string(node, node.value)
        elif isinstance(node.value, bytes) and len(node.value) >= 200:
            self.add(rules.RC_ENCODED_BLOB, Severity.medium, node,
                     f"{len(node.value)}-byte bytes constant")

    def check_string(self, node: ast.AST, value: str) -> None:
        if (match := catalog.CREDENTIAL_PATHS.search(value)) is not None:
            self.add(rules.RC_CREDENTIALS, Severity.high, node,
                     f"names a credential file: {match.group(0)}")
        elif catalog.SITE_PACKAGES.search(value.strip()):
            self.add(rules.RC_FS_WRITE, Severity.high, node,
                     f"names the interpreter's start-up files: {value.strip()[:60]!r}")
        elif len(value) >= 200 and catalog.ENCODED_BLOB.match(value.strip()):
            self.add(rules.RC_ENCODED_BLOB, Severity.high, node,
                     f"{len(value)}-character encoded string constant")

    # -- writes --------------------------------------------------------------------------------
    def write_target(self, node: ast.Call) -> tuple[Severity, str]:
        """Writes inside the working folder (a plain relative path) are medium, others high."""
        target = node.args[0] if node.args else None
        if isinstance(node.func, ast.Attribute) and self.names.resolve(node.func) not in _OPENERS:
            target = node.func.value  # Path(...).open("w")
        value = (fold(target, self.names.resolve, constants=self.names.constants)
                 if target is not None else UNKNOWN)
        if value.startswith(UNKNOWN) or not value:
            return Severity.high, "opens a computed path for writing"
        outside = is_outside(value)
        if catalog.SITE_PACKAGES.search(value) or (outside and value.endswith(".pth")):
            return Severity.critical, f"opens {value!r} for writing (runs at interpreter start)"
        if not outside:
            return Severity.medium, f"opens {value!r} for writing (working folder)"
        return Severity.high, f"opens {value!r} for writing, outside the working folder"

    def write_mode(self, node: ast.Call) -> bool:
        mode = (
            node.args[1]
            if len(node.args) > 1
            else next((k.value for k in node.keywords if k.arg == "mode"), None)
        )
        method = isinstance(node.func, ast.Attribute) and (
            self.names.resolve(node.func) not in _OPENERS)
        first = constant_str(node.args[0] if node.args else None)
        if method and first is not None and first and all(c in _MODE for c in first):
            mode = node.args[0]  # Path.open(mode)
        if mode is None:
            return False
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
            return any(flag in mode.value for flag in "wax+")
        return True  # a computed mode: assume the worst


def _literal(node: ast.AST | None) -> bool:
    """A literal value (`True`, `64`, `-1.0`, `("a", 1)`): data, not code."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_literal(e) for e in node.elts)
    return isinstance(node, ast.Constant)
