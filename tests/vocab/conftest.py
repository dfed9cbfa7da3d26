"""The pinned llama.cpp tree and the real-vocabulary pairs built from it, once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels_ref.fixtures_vocab import make_vocab_pair
from tests.support.llamacpp import session_cache_dir, source_tree


@pytest.fixture(scope="session")
def tree() -> Path:
    """The pinned llama.cpp source tree (fetched by `make engine`; a failure, never a skip)."""
    return source_tree()


@pytest.fixture(scope="session")
def vocab_cache() -> Path:
    """Where built tokenizers are kept across sessions (building one takes minutes)."""
    return session_cache_dir() / "vocab"


@pytest.fixture(scope="session", params=["qwen3", "llama3"])
def vocab_pair(request, tree, vocab_cache, tmp_path_factory) -> tuple[str, Path, Path]:
    """(name, target, drafter) of one real-vocabulary pair; treat it as read-only."""
    folder = tmp_path_factory.mktemp(f"vocab-{request.param}")
    target, drafter = make_vocab_pair(folder, request.param, tree, vocab_cache)
    return request.param, target, drafter
