"""Paths built from pieces: `Path.home() / ".cache" / "huggingface" / "token"`,
`os.path.join(os.path.expanduser("~"), ".ssh", "id_rsa")`, `"/root/.cache/hugging" + "face/token"`
and f-strings fold to one string (`~/.cache/huggingface/token`), so the credential and start-up
file patterns see the path whatever way it was spelled. Unknown pieces fold to `{}`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

_JOINERS = frozenset(
    {"os.path.join", "posixpath.join", "ntpath.join", "pathlib.Path", "pathlib.PurePath",
     "pathlib.PosixPath", "pathlib.PurePosixPath"}
)
_HOME = frozenset({"pathlib.Path.home", "os.path.expanduser", "os.path.expandvars"})
_KEEP = frozenset({"expanduser", "resolve", "absolute", "as_posix", "joinpath"})
# Where huggingface_hub keeps its files, token included (huggingface_hub/constants.py).
_HF_HOME = "~/.cache/huggingface"
_HF_CONSTANTS = {"huggingface_hub.constants.HF_HOME": _HF_HOME,
                 "huggingface_hub.constants.hf_cache_home": _HF_HOME,
                 "huggingface_hub.constants.HF_HUB_CACHE": _HF_HOME + "/hub",
                 "transformers.utils.hub.HF_HOME": _HF_HOME}
UNKNOWN = "{}"
MAX_DEPTH = 32


def fold(node: ast.AST, resolve: Callable[[ast.AST], str], depth: int = 0,
         constants: Mapping[str, str] | None = None) -> str:
    """The path `node` builds, with `{}` for what is not known; `~` for the home folder; a name
    bound to a string literal in the file (`constants`) is that string."""
    if depth > MAX_DEPTH:
        return UNKNOWN

    def again(inner: ast.AST) -> str:
        return fold(inner, resolve, depth + 1, constants)

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and constants and node.id in constants:
        return constants[node.id]
    if isinstance(node, (ast.Name, ast.Attribute)) and resolve(node) in _HF_CONSTANTS:
        return _HF_CONSTANTS[resolve(node)]
    if isinstance(node, ast.JoinedStr):
        return "".join(again(v) if not isinstance(v, ast.FormattedValue) else again(v.value)
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
        glue = "/" if isinstance(node.op, ast.Div) else ""
        return again(node.left) + glue + again(node.right)
    if isinstance(node, ast.Call):
        name = resolve(node.func)
        args = [again(a) for a in node.args]
        if name in _HOME:
            return "/".join(args) if args else "~"
        if name in _JOINERS or name.rsplit(".", 1)[-1] == "Path":
            return "/".join(args) if args else UNKNOWN
        if isinstance(node.func, ast.Attribute) and node.func.attr in _KEEP:
            return "/".join([again(node.func.value), *args])
        if name in ("str", "os.fspath", "os.path.abspath", "os.path.realpath") and args:
            return args[0]
        if name in ("os.environ.get", "os.getenv") and args and args[0] in ("HOME", "HF_HOME"):
            return "~" if args[0] == "HOME" else _HF_HOME
        return UNKNOWN
    if isinstance(node, ast.Subscript) and resolve(node.value) == "os.environ":
        key = node.slice
        if isinstance(key, ast.Constant) and key.value == "HOME":
            return "~"
    return UNKNOWN


def is_outside(path: str) -> bool:
    """Whether a folded path leaves the working folder (absolute, home, or `..`)."""
    return path.startswith(("/", "~", "\\")) or ".." in path
