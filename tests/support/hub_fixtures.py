"""The Hub fixtures the pins, CLI and gate tests share (a pytest plugin that `tests/conftest.py`
registers): an isolated HF cache, the Hub emulator serving the tiny pair, and the tiny pair as
local folders. Each is fresh for every test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fixtures import ModelPair
from tests.support.hub_emulator import HubEmulator, make_repo
from tests.support.pins import (
    CODE_REPO,
    DFLASH_PY,
    DRAFTER_REPO,
    TARGET_REPO,
    drafter_files,
    target_files,
    write_folder,
)


@pytest.fixture
def hf_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HF_HOME / HF_HUB_CACHE / the stat cache at tmp folders; returns the hub cache.

    huggingface_hub reads its constants at import, so they are patched too (dflash_guard.pins.hub
    itself reads the environment at each call). Telemetry off: no agent-harnesses fetch.
    """
    from huggingface_hub import constants

    home = tmp_path / "hf-home"
    cache = home / "hub"
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE",
                "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no real Hub
    monkeypatch.setenv("DFLASH_GUARD_CACHE_DIR", str(tmp_path / "dg-cache"))
    monkeypatch.setenv("DFLASH_GUARD_HUB_TIMEOUT", "2")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(home / ".agent_harnesses.json"))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 2)
    return cache


@pytest.fixture
def hub(tmp_path: Path, hf_env: Path, monkeypatch: pytest.MonkeyPatch):
    """A running emulator serving the tiny target, drafter and a remote-code repo.

    `constants.ENDPOINT` stays as imported (the client rewrites its URL template from it);
    dflash_guard.pins.hub passes the endpoint from HF_ENDPOINT explicitly on every call.
    """
    repos = tmp_path / "repos"
    emulator = HubEmulator(repos)
    emulator.commits = {
        TARGET_REPO: make_repo(repos, TARGET_REPO, target_files(), refs=("main", "v1.0")),
        DRAFTER_REPO: make_repo(repos, DRAFTER_REPO, drafter_files()),
        CODE_REPO: make_repo(repos, CODE_REPO, {"dflash.py": DFLASH_PY, "README.md": b"code\n"}),
    }
    emulator.hang_seconds = 4
    emulator.start()
    monkeypatch.setenv("HF_ENDPOINT", emulator.url)
    yield emulator
    emulator.set_fault(None)
    emulator.stop()


@pytest.fixture
def local_pair(tmp_path: Path) -> ModelPair:
    """The tiny target and drafter as plain local folders, fresh for each test."""
    return ModelPair(write_folder(tmp_path / "models" / "tiny-target", target_files()),
                     write_folder(tmp_path / "models" / "tiny-drafter", drafter_files()))
