"""First-party layering: no import cycle, the library never imports the CLI, kernels_ref stands
alone, and the rooms (`dflash_guard.scan`, `dflash_guard.trust`...) stand on declared floors: a
room imports only rooms on its own floor or below, and no two rooms import each other.

The import graph is read with `ast` from `dflash_guard/` and `kernels_ref/`: one node per module,
one edge per import at any depth (function-local and `TYPE_CHECKING` ones too, so a cycle cannot
hide behind a late import). Cycles are the strongly connected components (Tarjan).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dflash_guard", "kernels_ref")
CLI = ("dflash_guard.cli", "dflash_guard._cli")
ENTRY_POINTS = ("dflash_guard.cli", "dflash_guard._cli", "dflash_guard.__main__")
# The rooms, bottom floor first. A room is a top-level module or package of dflash_guard, or all
# of kernels_ref; a new room must be given a floor here.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("kernels_ref", "dflash_guard", "dflash_guard.errors", "dflash_guard.severity",
     "dflash_guard.outcome", "dflash_guard.patterns", "dflash_guard.progress", "dflash_guard.urls",
     "dflash_guard.near_tie"),
    ("dflash_guard.rules", "dflash_guard.fileio", "dflash_guard.schema", "dflash_guard.outputs",
     "dflash_guard.download"),
    ("dflash_guard.findings",),
    ("dflash_guard.templates", "dflash_guard.pins"),
    ("dflash_guard.scan",),
    ("dflash_guard.trust",),
    ("dflash_guard.lossless", "dflash_guard.launch", "dflash_guard.audit"),
    ("dflash_guard.rollout",),
    ("dflash_guard.gate",),
    ("dflash_guard.formats",),
    ("dflash_guard.cli", "dflash_guard._cli", "dflash_guard.__main__"),
)
# Room imports that break the floors today, each with the move that ends it.
KNOWN_BREACHES: dict[str, str] = {}


def module_name(path: Path, root: Path) -> str:
    """`dflash_guard/scan/runner.py` -> `dflash_guard.scan.runner` (a package: its folder)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """First-party modules `tree` imports, anywhere in it (`from a import b` names the module
    `a.b` when that is one, else `a`)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names]
            names = [name if name in known else base for name in names]
        else:
            continue
        found.update(name for name in names if name in known)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the first-party modules it imports."""
    paths = {
        module_name(path, root): path
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
    }
    known = set(paths)
    return {
        name: imported(ast.parse(path.read_text(encoding="utf-8")), name,
                       path.name == "__init__.py", known) - {name}
        for name, path in paths.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def room(module: str) -> str:
    """`dflash_guard.scan.pickle.scan` -> `dflash_guard.scan`; any kernels_ref module ->
    `kernels_ref`."""
    parts = module.split(".")
    return "kernels_ref" if parts[0] == "kernels_ref" else ".".join(parts[:2])


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Room -> the other rooms its modules import."""
    rooms: dict[str, set[str]] = {room(m): set() for m in graph}
    for module, deps in graph.items():
        rooms[room(module)].update(room(d) for d in deps if room(d) != room(module))
    return rooms


def floor_offences(rooms: dict[str, set[str]],
                   floors: tuple[tuple[str, ...], ...] = FLOORS) -> dict[str, list]:
    """Rooms with no declared floor, room imports up the floors, and room cycles."""
    floor = {name: level for level, names in enumerate(floors) for name in names}
    return {
        "rooms_without_a_floor": sorted(set(rooms) - set(floor)),
        "imports_up_the_floors": sorted(
            f"{r} -> {d}" for r, deps in rooms.items() for d in deps
            if r in floor and d in floor and floor[d] > floor[r]
            and f"{r} -> {d}" not in KNOWN_BREACHES
        ),
        "room_cycles": cycles({r: {d for d in deps if f"{r} -> {d}" not in KNOWN_BREACHES}
                               for r, deps in rooms.items()}),
    }


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def offenders() -> dict[str, list]:
    """Everything the layering rules forbid, as JSON (empty lists when clean)."""
    graph = import_graph()
    assert len(graph) > 100  # the walk found both packages, not an empty folder
    library = {m: deps for m, deps in graph.items() if not _under(m, ENTRY_POINTS)}
    return {
        "cycles": cycles(graph),
        "library_imports_cli": sorted(
            f"{m} -> {d}" for m, deps in library.items() for d in deps if _under(d, CLI)
        ),
        "kernels_ref_imports_guard": sorted(
            f"{m} -> {d}"
            for m, deps in graph.items()
            if _under(m, ["kernels_ref"])
            for d in deps
            if _under(d, ["dflash_guard"])
        ),
        **floor_offences(room_graph(graph)),
    }


def test_layering_holds() -> None:
    # In a fresh interpreter: earlier tests feed the scanner hostile, deeply nested Python, and
    # CPython 3.11 can then fail a later ast.parse with "AST constructor recursion depth mismatch".
    code = "import json; from tests.test_layering import offenders; print(json.dumps(offenders()))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert json.loads(run.stdout) == {
        "cycles": [],
        "library_imports_cli": [],
        "kernels_ref_imports_guard": [],
        "rooms_without_a_floor": [],
        "imports_up_the_floors": [],
        "room_cycles": [],
    }


def _graph_of(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    return import_graph(tmp_path)


def test_the_check_sees_each_spelling_of_an_import(tmp_path: Path) -> None:
    graph = _graph_of(tmp_path, {
        "dflash_guard/__init__.py": "",
        "dflash_guard/a.py": "def f():\n    from dflash_guard.cli import common\n",
        "dflash_guard/b.py": "from . import a\nimport dflash_guard._cli\n",
        "dflash_guard/_cli.py": "",
        "dflash_guard/cli/__init__.py": "",
        "dflash_guard/cli/common.py": "from ..b import thing\n",
        "kernels_ref/__init__.py": "",
        "kernels_ref/m.py": "from dflash_guard import a\n",
    })
    assert graph["dflash_guard.a"] == {"dflash_guard.cli.common"}
    assert graph["dflash_guard.b"] == {"dflash_guard.a", "dflash_guard._cli"}
    assert graph["dflash_guard.cli.common"] == {"dflash_guard.b"}
    assert graph["kernels_ref.m"] == {"dflash_guard.a"}


def test_the_check_finds_cycles_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"a"}}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_room_check_fails_on_a_planted_room_cycle() -> None:
    """Two rooms that import each other through different modules (no module cycle) are a room
    cycle, and the import from the lower floor is an import up the floors."""
    graph = {
        "dflash_guard.trust.judge": {"dflash_guard.lossless.defaults"},
        "dflash_guard.lossless.defaults": set(),
        "dflash_guard.lossless.report": {"dflash_guard.trust.comparison"},
        "dflash_guard.trust.comparison": set(),
        "dflash_guard.findings": set(),
    }
    assert cycles(graph) == []
    rooms = room_graph(graph)
    assert rooms == {"dflash_guard.trust": {"dflash_guard.lossless"},
                     "dflash_guard.lossless": {"dflash_guard.trust"},
                     "dflash_guard.findings": set()}
    assert floor_offences(rooms) == {
        "rooms_without_a_floor": [],
        "imports_up_the_floors": ["dflash_guard.trust -> dflash_guard.lossless"],
        "room_cycles": [["dflash_guard.lossless", "dflash_guard.trust"]],
    }
    same_floor = (("dflash_guard.findings",), ("dflash_guard.trust", "dflash_guard.lossless"))
    assert floor_offences(rooms, same_floor)["room_cycles"] == [
        ["dflash_guard.lossless", "dflash_guard.trust"]]
    assert floor_offences({"dflash_guard.newroom": set()})["rooms_without_a_floor"] == [
        "dflash_guard.newroom"]

