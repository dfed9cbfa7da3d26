"""The library never imports the CLI: only `dflash_guard/cli/` and `_cli.py` may."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import dflash_guard

PACKAGE = Path(dflash_guard.__file__).parent


def _cli_imports(source: str) -> list[str]:
    """The `dflash_guard.cli` imports in `source`, at any depth (function-local ones too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [n for n in names if n == "dflash_guard.cli" or n.startswith("dflash_guard.cli.")]
    return found


def _library_modules() -> list[Path]:
    return [
        path for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in ("cli", "_cli.py")
    ]


def _offenders() -> dict[str, list[str]]:
    modules = _library_modules()
    assert len(modules) > 20  # the walk found the package, not an empty folder
    return {
        str(path.relative_to(PACKAGE)): imports
        for path in modules
        if (imports := _cli_imports(path.read_text(encoding="utf-8")))
    }


def test_library_modules_do_not_import_the_cli() -> None:
    # In a fresh interpreter: earlier tests feed the scanner hostile, deeply nested Python, and
    # CPython 3.11 can then fail a later ast.parse with "AST constructor recursion depth mismatch".
    code = ("import json; from tests.pins.test_layering import _offenders; "
            "print(json.dumps(_offenders()))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, check=True)
    assert json.loads(run.stdout) == {}


def test_the_check_sees_a_cli_import() -> None:
    """The detector fires on each spelling of the import and stays quiet on a library one."""
    assert _cli_imports("def f():\n    from dflash_guard.cli.common import stderr\n")
    assert _cli_imports("import dflash_guard.cli.verify_cmd\n")
    assert _cli_imports("from dflash_guard import cli\n")
    assert not _cli_imports("from dflash_guard.pins import hub\nimport dflash_guard.client\n")
