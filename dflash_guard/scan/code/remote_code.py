"""Remote code (`.py` files and `auto_map` targets): parsed with `ast`, never imported.

Static rules on Python are a review aid, not a safety boundary (the boundary is `reviewed_code`
by sha256 in the policy). Names are resolved first (`names`), so aliases, re-bindings, constant
`getattr`, `sys.modules`/`__builtins__`/`globals()` lookups and star imports reach the same
rules; `catalog` holds the tables (allowed imports, actions), `visitor` the walk.

Rules (default severity, see `scan/rules.py`): DG-RC-PROCESS, DG-RC-NETWORK, DG-RC-DYNAMIC-CODE,
DG-RC-ENCODED-BLOB, DG-RC-CREDENTIALS, DG-RC-FS-WRITE (low inside save-time methods),
DG-RC-MONKEY-PATCH, DG-RC-NESTED-REMOTE-CODE, DG-RC-UNUSUAL-IMPORT,
DG-RC-IMPORT-TIME-SIDE-EFFECT (one level above the action when it runs at import time),
DG-RC-UNPARSEABLE, DG-RC-UNREVIEWED.
"""

from __future__ import annotations

import ast
import warnings

from dflash_guard import rules
from dflash_guard.findings import Finding
from dflash_guard.scan.code.visitor import DETECTOR, Visitor
from dflash_guard.severity import Severity

__all__ = ["DETECTOR", "auto_map_targets", "check_source", "peft_parent_library", "unreviewed"]


def check_source(source: bytes, display: str) -> list[Finding]:
    """Findings for one Python source file (parsed, never imported)."""

    def unparseable(message: str, line: int | None = None) -> list[Finding]:
        return [
            Finding.of(rules.RC_UNPARSEABLE, display, message, severity=Severity.high, line=line,
                       detector=DETECTOR)
        ]

    try:
        with warnings.catch_warnings():  # invalid escapes and the like: the scanned file's business
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=display)
    except (SyntaxError, ValueError) as error:
        return unparseable(f"does not parse as Python: {error}", getattr(error, "lineno", None))
    except (RecursionError, MemoryError):  # how CPython's parser reports very deep nesting
        return unparseable("nested too deeply to parse")
    except SystemError as error:  # CPython 3.11's "AST constructor recursion depth mismatch"
        return unparseable(f"the interpreter could not build its syntax tree: {error}")
    first = Visitor(display)  # bindings of the whole file first: a name bound below its use
    try:
        first.visit(tree)
        visitor = Visitor(display, names=first.names)
        visitor.visit(tree)
    except RecursionError:
        return unparseable("nested too deeply to check")
    unique = {(f.rule_id, f.severity, f.line, f.message): f for f in visitor.findings}
    return list(unique.values())


def peft_parent_library(config: object) -> str | None:
    """The module PEFT's AutoPeftModel imports by name (`auto_mapping.parent_library` of an
    `adapter_config.json`) when it is not transformers' own: None when there is none or it is."""
    mapping = config.get("auto_mapping") if isinstance(config, dict) else None
    library = mapping.get("parent_library") if isinstance(mapping, dict) else None
    if library is None or library == "transformers" or (
        isinstance(library, str) and library.startswith("transformers.")
    ):
        return None
    return str(library)


def unreviewed(display: str, sha256: str) -> Finding:
    """The note that a code file has not been reviewed (by its sha256)."""
    return Finding.of(
        rules.RC_UNREVIEWED, display,
        f"remote code not reviewed (sha256 {sha256}); the gate refuses it at any severity "
        "until the policy's reviewed_code lists it (`dflash-guard review` writes that policy)",
        severity=Severity.low, detector=DETECTOR,
    )


def auto_map_targets(config: object) -> list[str]:
    """Every class reference in an `auto_map` (`module.Class` or `org/repo--module.Class`), in
    the dict form and in AutoTokenizer's legacy list form (`[slow, fast]`)."""
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    if isinstance(auto_map, list):
        auto_map = {"AutoTokenizer": auto_map}
    if not isinstance(auto_map, dict):
        return []
    targets: list[str] = []
    for value in auto_map.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item:
                targets.append(item)
    return targets
