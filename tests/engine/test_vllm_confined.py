"""vLLM's DFlash engine under the Landlock ruleset `launch --exec` builds (issue 44, item 4).

The built-in pair at head_dim 64 (as in test_vllm.py), locked as two local folders:
- `launch vllm --exec` under a policy with `launch.confinement: required` serves a completion, its
  internal ports pinned from `VLLM_PORT`, its writes in the scratch folder launch made;
- a `chat_template.jinja` planted in the target folder after the ruleset was built (the
  approved files: every locked file) makes vLLM fail at start with `PermissionError`;
- a hook run by the vLLM venv's interpreter under the ruleset, after importing the server,
  reads the approved config and fails (EACCES) to read a file outside the set or to connect to
  a TCP port outside it.

The install is part of the suite (`make engine`): when it fails, these tests fail (never skip).
Two vLLM starts, one after the other (about 45 s each on an idle 2-core machine).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from dflash_guard.launch.confine import confinement
from tests.support.fixtures import lock_pair
from tests.support.launch import confined_policy
from tests.support.llamacpp import EngineUnavailable, free_port
from tests.support.trust import write_lock
from tests.support.vllm import SERVE_ARGS, SERVE_ENV, install, vllm_servers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def python() -> Path:
    return install()


@pytest.fixture(scope="module")
def lock(padded_pair, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vllm-confined")
    return write_lock(lock_pair(padded_pair, root / "cache").lock, root / "pair.lock")


def test_launch_exec_confinement_required_serves_confined(python, padded_pair, lock,
                                                          tmp_path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "dflash_guard", "launch", "vllm", "--lock", str(lock),
               "--policy", str(confined_policy(tmp_path)), "--root",
               f"target={padded_pair.target}", "--root", f"drafter={padded_pair.drafter}",
               "--port", str(port), "--program", str(python), "--exec", "--", *SERVE_ARGS,
               "--max-model-len", "256"]
    with vllm_servers(command) as (server,):
        model = httpx2.get(server.url + "/v1/models", timeout=10.0).json()["data"][0]["id"]
        answer = httpx2.post(server.url + "/v1/completions", timeout=300.0, json={
            "model": model, "prompt": "def f(x):", "max_tokens": 8, "temperature": 0})
        log = server.log.read_text()
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 8
    assert "the engine runs confined (Landlock ABI" in log, log[-2000:]


def test_a_template_planted_after_the_ruleset_was_built_fails_closed(python, padded_pair,
                                                                     tmp_path) -> None:
    target = shutil.copytree(padded_pair.target, tmp_path / "target")
    target.chmod(0o755)  # the fixture's folders are read-only
    files = [p for folder in (target, padded_pair.drafter) for p in sorted(folder.iterdir())]
    port = free_port()
    confined = confinement("vllm", python, files, port)
    built = confined.ruleset.build()
    (target / "chat_template.jinja").write_text("{{ 'planted' }}")
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
               "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "256",
               *SERVE_ARGS]
    try:
        with pytest.raises(EngineUnavailable, match="vLLM exited") as failed, vllm_servers(
                command, env=confined.env, preexec=built.enforce):
            pass
    finally:
        built.close()
        shutil.rmtree(confined.scratch)
    assert "PermissionError" in str(failed.value), str(failed.value)
    assert "chat_template.jinja" in str(failed.value)


HOOK = """
import errno, json, socket, sys
import vllm.entrypoints.openai.api_server  # the engine's own modules load under the ruleset
results = []
for path in (sys.argv[1], sys.argv[2]):
    try:
        with open(path) as handle:
            results.append(len(handle.read()) > 0)
    except OSError as error:
        results.append(errno.errorcode[error.errno])
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=10).close()
    results.append(True)
except OSError as error:
    results.append(errno.errorcode[error.errno])
print(json.dumps(results))
"""


def test_inside_the_confined_engine_other_files_and_ports_are_refused(python, padded_pair,
                                                                      tmp_path) -> None:
    """A hook run by the engine's interpreter under the engine's ruleset, after importing the
    server: the approved config reads; a file outside the set and a TCP port outside it fail."""
    files = [p for folder in (padded_pair.target, padded_pair.drafter)
             for p in sorted(folder.iterdir())]
    outside = tmp_path / "secret.txt"
    outside.write_text("not approved")
    confined = confinement("vllm", python, files, free_port())
    built = confined.ruleset.build()
    try:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            done = subprocess.run(
                [str(python), "-c", HOOK, str(padded_pair.target / "config.json"), str(outside),
                 str(listener.getsockname()[1])], capture_output=True, text=True, timeout=900,
                env={**os.environ, **SERVE_ENV, **confined.env}, preexec_fn=built.enforce,
                check=False)
    finally:
        built.close()
        shutil.rmtree(confined.scratch)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [True, "EACCES", "EACCES"]
