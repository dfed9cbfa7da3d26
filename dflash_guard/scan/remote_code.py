"""Remote code (`.py` files and `auto_map` targets): parsed with `ast`, never imported.

Rules (severity):
- DG-RC-PROCESS: `os.system`/`popen`/`exec*`/`spawn*`, `subprocess`, `pty` (critical when called).
- DG-RC-NETWORK: `socket`, `urllib`, `requests`, `httpx`, `http.client`, `aiohttp`... (high).
- DG-RC-DYNAMIC-CODE: `eval`/`exec` (critical); `compile`, `__import__`, `importlib`, `marshal`,
  `pickle`, `ctypes`, `getattr` with a computed name on a module or builtins (high).
- DG-RC-ENCODED-BLOB: base64/zlib/hex/codecs decoding calls, long encoded string constants (high).
- DG-RC-CREDENTIALS: `os.environ`/`getenv` (medium); token or key paths and names (high).
- DG-RC-FS-WRITE: file writes or deletions (`open(..., "w")`, `shutil.rmtree`, `os.remove`) (high).
- DG-RC-IMPORT-TIME-SIDE-EFFECT: a call above made at import time (module level, class body,
  default argument, decorator), one level above the call's own severity; any other module-level
  call not on a short list of usual ones (low).
- DG-RC-UNREVIEWED: the file's sha256 is not in the reviewed set (low).
"""

from __future__ import annotations

import ast
import re

from dflash_guard.scan import rules
from dflash_guard.scan.interface import Finding, Rule, Severity

DETECTOR = "remote-code"

_NETWORK_MODULES = frozenset(
    [
        "socket",
        "urllib",
        "urllib2",
        "urllib3",
        "requests",
        "httpx",
        "http",
        "aiohttp",
        "ftplib",
        "smtplib",
        "telnetlib",
        "paramiko",
        "websocket",
        "websockets",
    ]
)
_PROCESS_MODULES = frozenset({"subprocess", "pty", "_posixsubprocess", "multiprocessing"})
_DYNAMIC_MODULES = frozenset(
    {
        "importlib",
        "marshal",
        "pickle",
        "_pickle",
        "dill",
        "cloudpickle",
        "ctypes",
        "cffi",
        "runpy",
        "code",
        "codeop",
    }
)
_OS_PROCESS = re.compile(r"^(system|popen|exec\w*|spawn\w*|fork\w*|posix_spawn\w*|kill)$")
_OS_WRITE = frozenset(
    [
        "remove",
        "unlink",
        "rmdir",
        "removedirs",
        "rename",
        "replace",
        "chmod",
        "chown",
        "symlink",
        "link",
        "makedirs",
        "mkdir",
        "truncate",
    ]
)
_DECODERS = frozenset(
    [
        "b64decode",
        "b32decode",
        "b16decode",
        "a85decode",
        "b85decode",
        "decodebytes",
        "standard_b64decode",
        "urlsafe_b64decode",
        "decompress",
        "unhexlify",
        "fromhex",
        "a2b_base64",
        "a2b_hex",
    ]
)
_CREDENTIAL_HINTS = re.compile(
    r"HF_TOKEN|HUGGING_FACE_HUB_TOKEN|huggingface/token|\.ssh|id_rsa|id_ed25519|\.netrc|"
    r"AWS_SECRET|AWS_ACCESS_KEY|\.aws/credentials|GITHUB_TOKEN|OPENAI_API_KEY|\.git-credentials",
    re.IGNORECASE,
)
_ENCODED_BLOB = re.compile(r"^(?:[A-Za-z0-9+/]{200,}={0,2}|[0-9a-fA-F]{200,})$")
# Module-level calls that realistic modeling code makes and that do nothing outside the module.
_USUAL_MODULE_CALLS = frozenset(
    [
        "getLogger",
        "get_logger",
        "TypeVar",
        "namedtuple",
        "NewType",
        "dataclass",
        "field",
        "wrap",
        "filterwarnings",
        "simplefilter",
        "warn",
        "register",
        "register_buffer",
        "is_torch_available",
        "is_flash_attn_available",
        "is_flash_attn_2_available",
        "is_torch_fx_available",
        "is_torchdynamo_compiling",
        "require_version",
        "replace_return_docstrings",
        "add_start_docstrings",
        "frozenset",
        "set",
        "dict",
        "list",
        "tuple",
        "ModuleList",
        "ParameterDict",
        "compile_regex",
        "Enum",
        "getenv_bool",
        "object_hook",
    ]
)
_IMPORT_TIME = ("module level", "class body", "default argument", "decorator")


def _dotted(node: ast.AST) -> str:
    """`a.b.c` for a Name/Attribute chain, '' for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class _Visitor(ast.NodeVisitor):
    def __init__(self, display: str) -> None:
        self.display = display
        self.findings: list[Finding] = []
        self.aliases: dict[str, str] = {}  # local name -> imported dotted name
        self.context: list[str] = ["module level"]

    # -- bookkeeping ---------------------------------------------------------------------------
    def add(
        self, rule: Rule, severity: Severity, node: ast.AST, message: str, *, runs: bool = False
    ) -> None:
        """Record a finding; an action (`runs`) at import time is also an import-time finding."""
        where = self.context[-1]
        line = getattr(node, "lineno", None)
        self.findings.append(
            Finding.of(
                rule, self.display, message, severity=severity, line=line, detector=DETECTOR
            )
        )
        if runs and where in _IMPORT_TIME and rule != rules.RC_IMPORT_TIME_SIDE_EFFECT:
            raised = Severity(min(severity + 1, Severity.critical))
            self.findings.append(
                Finding(
                    rules.RC_IMPORT_TIME_SIDE_EFFECT.id,
                    raised,
                    self.display,
                    f"runs at import time ({where}): {message}",
                    line=line,
                    detector=DETECTOR,
                )
            )

    def resolve(self, node: ast.AST) -> str:
        dotted = _dotted(node)
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            return self.aliases[head] + ("." + rest if rest else "")
        return dotted

    def in_context(self, label: str, nodes: list[ast.AST]) -> None:
        self.context.append(label)
        for node in nodes:
            self.visit(node)
        self.context.pop()

    # -- scopes --------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.in_context("decorator", node.decorator_list)
        defaults = [d for d in node.args.defaults + node.args.kw_defaults if d is not None]
        self.in_context("default argument", defaults)
        self.in_context("function body", node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.in_context("function body", [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.in_context("decorator", node.decorator_list)
        self.in_context(self.context[-1], node.bases + [k.value for k in node.keywords])
        self.in_context("class body", node.body)

    # -- imports -------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.aliases[(alias.asname or alias.name).split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )
            self.check_module(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}" if module else alias.name
            self.aliases[alias.asname or alias.name] = full
            self.check_module(full if node.level == 0 else "", node)

    def check_module(self, name: str, node: ast.AST) -> None:
        root = name.split(".")[0]
        if root in _PROCESS_MODULES:
            self.add(rules.RC_PROCESS, Severity.high, node, f"imports {name} (runs processes)")
        elif root in _NETWORK_MODULES:
            self.add(rules.RC_NETWORK, Severity.high, node, f"imports {name} (network access)")
        elif root in _DYNAMIC_MODULES:
            self.add(
                rules.RC_DYNAMIC_CODE,
                Severity.high,
                node,
                f"imports {name} (loads or runs code dynamically)",
            )

    # -- expressions ---------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        name = self.resolve(node.func)
        last = name.rsplit(".", 1)[-1]
        self.check_call(node, name, last)
        self.generic_visit(node)

    def check_call(self, node: ast.Call, name: str, last: str) -> None:
        if name in ("eval", "exec", "builtins.eval", "builtins.exec"):
            self.add(rules.RC_DYNAMIC_CODE, Severity.critical, node, f"calls {last}()", runs=True)
        elif name in ("compile", "__import__", "builtins.compile", "builtins.__import__"):
            self.add(rules.RC_DYNAMIC_CODE, Severity.high, node, f"calls {last}()", runs=True)
        elif name in ("getattr", "builtins.getattr") and self.computed_getattr(node):
            self.add(
                rules.RC_DYNAMIC_CODE,
                Severity.high,
                node,
                "getattr() with a computed name on a module or builtins",
                runs=True,
            )
        elif (
            name.startswith(("os.", "posix.", "nt."))
            and _OS_PROCESS.match(last)
            or name.split(".")[0] in _PROCESS_MODULES
            and "." in name
        ):
            self.add(rules.RC_PROCESS, Severity.critical, node, f"calls {name}()", runs=True)
        elif name.split(".")[0] in _NETWORK_MODULES and "." in name:
            self.add(rules.RC_NETWORK, Severity.high, node, f"calls {name}()", runs=True)
        elif last in _DECODERS and name.split(".")[0] in {
            "base64",
            "zlib",
            "binascii",
            "bytes",
            "lzma",
            "bz2",
            "gzip",
            "codecs",
        }:
            self.add(
                rules.RC_ENCODED_BLOB,
                Severity.high,
                node,
                f"decodes an encoded payload with {name}()",
                runs=True,
            )
        elif name == "codecs.decode" or last == "fromhex":
            self.add(
                rules.RC_ENCODED_BLOB, Severity.high, node, f"decodes data with {name}()", runs=True
            )
        elif name in ("os.getenv", "os.getenvb"):
            self.add(
                rules.RC_CREDENTIALS,
                Severity.medium,
                node,
                "reads environment variables",
                runs=True,
            )
        elif name.startswith(("os.", "shutil.")) and (
            last in _OS_WRITE or name.startswith("shutil.")
        ):
            self.add(
                rules.RC_FS_WRITE,
                Severity.high,
                node,
                f"changes the file system: {name}()",
                runs=True,
            )
        elif name in ("open", "builtins.open", "io.open") and self.write_mode(node):
            severity, message = self.write_target(node)
            self.add(rules.RC_FS_WRITE, severity, node, message, runs=True)
        elif last in ("write_text", "write_bytes", "unlink", "rmdir", "rmtree", "touch"):
            self.add(
                rules.RC_FS_WRITE,
                Severity.high,
                node,
                f"changes the file system: .{last}()",
                runs=True,
            )
        elif self.context[-1] == "module level" and last not in _USUAL_MODULE_CALLS:
            self.add(
                rules.RC_IMPORT_TIME_SIDE_EFFECT,
                Severity.low,
                node,
                f"calls {name or 'an expression'}() at import time",
            )

    def computed_getattr(self, node: ast.Call) -> bool:
        if len(node.args) < 2 or isinstance(node.args[1], ast.Constant):
            return False
        target = self.resolve(node.args[0])
        return bool(target) and (
            target.split(".")[0] in self.module_names() or target in ("builtins", "__builtins__")
        )

    def module_names(self) -> set[str]:
        return {local for local, full in self.aliases.items() if "." not in full} | {
            "os",
            "sys",
            "builtins",
            "__builtins__",
        }

    @staticmethod
    def write_target(node: ast.Call) -> tuple[Severity, str]:
        """Writes inside the working folder (a plain relative path) are medium, others high."""
        path = node.args[0] if node.args else None
        if isinstance(path, ast.Constant) and isinstance(path.value, str):
            value = path.value
            if not value.startswith(("/", "~", "\\")) and ".." not in value:
                return Severity.medium, f"opens {value!r} for writing (working folder)"
            return Severity.high, f"opens {value!r} for writing, outside the working folder"
        return Severity.high, "opens a computed path for writing"

    @staticmethod
    def write_mode(node: ast.Call) -> bool:
        mode = (
            node.args[1]
            if len(node.args) > 1
            else next((k.value for k in node.keywords if k.arg == "mode"), None)
        )
        if mode is None:
            return False
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
            return any(flag in mode.value for flag in "wax+")
        return True  # a computed mode: assume the worst

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self.resolve(node) == "os.environ":
            self.add(rules.RC_CREDENTIALS, Severity.medium, node, "reads os.environ")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            if _CREDENTIAL_HINTS.search(node.value):
                self.add(
                    rules.RC_CREDENTIALS,
                    Severity.high,
                    node,
                    f"names a credential: {_CREDENTIAL_HINTS.search(node.value).group(0)}",
                )
            elif len(node.value) >= 200 and _ENCODED_BLOB.match(node.value.strip()):
                self.add(
                    rules.RC_ENCODED_BLOB,
                    Severity.high,
                    node,
                    f"{len(node.value)}-character encoded string constant",
                )
        elif isinstance(node.value, bytes) and len(node.value) >= 200:
            self.add(
                rules.RC_ENCODED_BLOB,
                Severity.medium,
                node,
                f"{len(node.value)}-byte bytes constant",
            )


def check_source(source: bytes, display: str) -> list[Finding]:
    """Findings for one Python source file (parsed, never imported)."""

    def unparseable(message: str, line: int | None = None) -> list[Finding]:
        return [
            Finding(
                rules.RC_UNPARSEABLE.id,
                Severity.high,
                display,
                message,
                line=line,
                detector=DETECTOR,
            )
        ]

    try:
        tree = ast.parse(source, filename=display)
    except (SyntaxError, ValueError) as error:
        return unparseable(f"does not parse as Python: {error}", getattr(error, "lineno", None))
    except (RecursionError, MemoryError):  # how CPython's parser reports very deep nesting
        return unparseable("nested too deeply to parse")
    visitor = _Visitor(display)
    try:
        visitor.visit(tree)
    except RecursionError:
        return unparseable("nested too deeply to check")
    return visitor.findings


def unreviewed(display: str, sha256: str) -> Finding:
    """The note that a code file has not been reviewed (by its sha256)."""
    return Finding(
        rules.RC_UNREVIEWED.id,
        Severity.low,
        display,
        f"remote code not reviewed (sha256 {sha256}); review it and add the digest",
        detector=DETECTOR,
    )


def auto_map_targets(config: object) -> list[str]:
    """Every class reference in an `auto_map` (`module.Class` or `org/repo--module.Class`)."""
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    if not isinstance(auto_map, dict):
        return []
    targets: list[str] = []
    for value in auto_map.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item:
                targets.append(item)
    return targets
