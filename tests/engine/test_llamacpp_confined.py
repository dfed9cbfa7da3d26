"""llama.cpp's `llama-server` under the Landlock ruleset `launch --exec` builds (issue 44, item 4).

The built-in pair converted to f32 GGUF (a target folder and a drafter folder, one file each),
locked as two local folders:
- `launch llama.cpp --exec` under a policy with `launch.confinement: required` serves a completion;
- under the ruleset built for the approved files, the engine fails closed (EACCES) when the
  target GGUF was replaced after the ruleset was built (a new inode at the approved path), when
  it is told to load a GGUF added to the approved folder afterwards, and when it is told to
  serve on a port outside the ruleset.

The engine build is part of the suite: a failed build fails (never skips).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import httpx2
import pytest

from dflash_guard.launch.confine import engine_ruleset
from dflash_guard.pins.resolve import build_lock
from tests.support.launch import confined_policy
from tests.support.llamacpp import EngineUnavailable, build_server, convert, free_port, serving
from tests.support.trust import write_lock

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

ENGINE_ARGS = ("-c", "256", "-np", "1", "-t", "1", "--seed", "0")


@pytest.fixture(scope="module")
def engine() -> Path:
    return build_server()


@pytest.fixture(scope="module")
def deploy(builtin_pair, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(target folder, drafter folder, lock): one GGUF each, locked."""
    folder = tmp_path_factory.mktemp("confined")
    target = convert(builtin_pair.target, folder / "target" / "target.gguf").parent
    drafter = convert(builtin_pair.drafter, folder / "drafter" / "drafter.gguf",
                      target_dir=builtin_pair.target).parent
    for extra in (*target.glob("*.json"), *drafter.glob("*.json")):
        extra.unlink()  # the converter's record: not what is served
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH_GUARD_CACHE_DIR", str(folder / "cache"))
        lock = build_lock({"target": str(target), "drafter": str(drafter)}).lock
    assert lock is not None
    return target, drafter, write_lock(lock, folder / "deploy.lock")


def completion(url: str) -> dict[str, object]:
    answer = httpx2.post(url + "/completion", json={"prompt": "def f(x):", "n_predict": 8},
                         timeout=60.0)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_launch_exec_confinement_required_serves_confined(engine, deploy, tmp_path) -> None:
    target, drafter, lock = deploy
    port = free_port()
    policy = confined_policy(tmp_path, gguf_comparisons=False)
    command = [sys.executable, "-m", "dflash_guard", "launch", "llama.cpp", "--lock", str(lock),
               "--policy", str(policy), "--root", f"target={target}", "--root",
               f"drafter={drafter}", "--port", str(port), "--program", str(engine), "--exec",
               "--", *ENGINE_ARGS]
    with serving(command, port) as server:
        assert completion(server.url)["tokens_predicted"] == 8
        log = server.log.read_text()
    assert "the engine runs confined (Landlock ABI" in log, log[-2000:]


def confined_server(engine: Path, model: Path, files: list[Path], port: int, tmp_path: Path,
                    *extra: str, serve_on: int | None = None):
    """`llama-server` on `model` under the ruleset for `files` and `port`, built now; the
    server is told to listen on `serve_on` (default: `port`)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    built = engine_ruleset("llama.cpp", engine, files, port, scratch).build()
    listen = port if serve_on is None else serve_on
    command = [str(engine), "-m", str(model), "--host", "127.0.0.1", "--port", str(listen),
               *ENGINE_ARGS, *extra]
    return built, serving(command, listen, built.enforce)


def test_a_gguf_replaced_after_the_ruleset_was_built_fails_closed(engine, deploy,
                                                                  tmp_path) -> None:
    target = shutil.copytree(deploy[0], tmp_path / "target")
    model = target / "target.gguf"
    built, server = confined_server(engine, model, [model], free_port(), tmp_path)
    shutil.copyfile(model, target / "swap.gguf")
    os.replace(target / "swap.gguf", model)  # same bytes, a new inode at the approved path
    with pytest.raises(EngineUnavailable, match="exited") as failed, server:
        pass
    built.close()
    assert "Permission denied" in str(failed.value) or "failed to" in str(failed.value)


def test_a_gguf_added_to_the_folder_after_the_ruleset_was_built_fails_closed(
        engine, deploy, tmp_path) -> None:
    target = shutil.copytree(deploy[0], tmp_path / "target")
    model, planted = target / "target.gguf", target / "planted.gguf"
    draft = ("-md", str(planted), "--spec-type", "draft-dflash")
    built, server = confined_server(engine, model, [model], free_port(), tmp_path, *draft)
    shutil.copyfile(deploy[1] / "drafter.gguf", planted)
    with pytest.raises(EngineUnavailable, match="exited"), server:
        pass
    built.close()
    # the same command with the planted file approved serves: the refusal was the ruleset's
    built, server = confined_server(engine, model, [model, planted], free_port(), tmp_path,
                                    *draft)
    with server as running:
        assert completion(running.url)["tokens_predicted"] == 8
    built.close()


def test_serving_on_a_port_outside_the_ruleset_fails_closed(engine, deploy, tmp_path) -> None:
    model = deploy[0] / "target.gguf"
    built, server = confined_server(engine, model, [model], free_port(), tmp_path,
                                    serve_on=free_port())
    with pytest.raises(EngineUnavailable, match="exited"), server:
        pass
    built.close()
