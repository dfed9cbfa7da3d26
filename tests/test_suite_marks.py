"""The suite's marks hold what `make test` and the fast lane rely on: a module that starts an
engine is marked `slow` (so `-m "not slow"` skips it), and one that starts vLLM is also marked
`vllm` (tests/conftest.py hands those out first); a `vllm` mark on a module that starts no vLLM
would put it ahead for nothing. What a module starts is read from what it imports."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

TESTS = Path(__file__).resolve().parent
STARTS_VLLM = {("tests.support.vllm", "vllm_servers"), ("tests.support.vllm", "vllm_server"),
               ("dflash_guard.pins.fileset", "ask_vllm")}
STARTS_LLAMACPP = {("tests.support.llamacpp", "llama_server"),
                   ("tests.support.llamacpp", "serving"),
                   ("tests.support.llamacpp", "build_server")}


def imported(path: Path) -> set[tuple[str, str]]:
    """(module, name) of each `from module import name` in `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {(node.module or "", alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) for alias in node.names}


def marks(path: Path) -> set[str]:
    """The names of the module's `pytestmark` marks."""
    name = ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)
    declared = getattr(importlib.import_module(name), "pytestmark", [])
    return {mark.name for mark in (declared if isinstance(declared, list) else [declared])}


def test_modules_that_start_engines_are_marked() -> None:
    found = {path: imported(path) for path in sorted(TESTS.rglob("test_*.py"))}
    vllm = [path for path, names in found.items() if names & STARTS_VLLM]
    llamacpp = [path for path, names in found.items() if names & STARTS_LLAMACPP]
    assert vllm and llamacpp  # the rule still sees what it is about
    for path in vllm:
        assert {"slow", "vllm"} <= marks(path), path
    for path in llamacpp:
        assert "slow" in marks(path), path
    for path in set(found) - set(vllm):
        assert "vllm" not in marks(path), f"{path} is marked vllm but starts no vLLM"


def test_the_vllm_modules_are_handed_out_first() -> None:
    """tests/conftest.py's order on a made-up collection: vllm, engine, slow, the rest."""
    from tests.conftest import pytest_collection_modifyitems

    class Item:
        def __init__(self, nodeid: str, *names: str) -> None:
            self.nodeid, self.names = nodeid, names

        def get_closest_marker(self, name: str) -> object:
            return name if name in self.names else None

    items = [Item("tests/a/test_fast.py::t"), Item("tests/a/test_slow.py::t", "slow"),
             Item("tests/engine/test_llama.py::t", "slow"),
             Item("tests/engine/test_fileset.py::t", "slow", "vllm")]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [item.nodeid.split("::")[0].rsplit("/", 1)[1] for item in items] == [
        "test_fileset.py", "test_llama.py", "test_slow.py", "test_fast.py"]
