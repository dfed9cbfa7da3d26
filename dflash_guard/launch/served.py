"""`launch --verify-served`: start the engine as a child, diff what it serves, record the verdict.

`--exec` alone replaces launch with the engine (nothing is left to check it). With
`--verify-served`, launch starts the engine as a child process in its own session instead, waits
for it to answer `/v1/models` (bounded), and runs the reference diff against it: kernels_ref on
the verified target folder, the engine's tokens and logprobs at every position, and (unless
`--baseline`) the drafter's acceptance against kernels_ref's with the verified drafter folder,
read from the engine's `/metrics`. No URL is configured: the endpoint is the one launch started.
The verdict goes into a serving record (`trust.serving`), signed with `--key` when given. A
failed diff stops the engine (its whole process group) and launch exits 1 with the reason; a
passed one either stops it too (no `--exec`: a pre-deploy check) or keeps supervising it
(`--exec`): SIGTERM, SIGINT and SIGHUP are passed on to the engine's group and launch exits with
the engine's status. Before that, the same signals end launch and stop the engine: a started
engine is never left behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from dflash_guard.errors import InputError
from dflash_guard.launch.engines import LaunchCommand
from dflash_guard.launch.plan import LaunchOptions, LaunchPlan, verify_folder
from dflash_guard.lossless.endpoint.client import EndpointError
from dflash_guard.lossless.endpoint.engine import EngineEndpoint
from dflash_guard.outcome import Outcome
from dflash_guard.pins.hashing import sha256_file
from dflash_guard.pins.lockfile import Lockfile
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from dflash_guard.trust.policy import Policy
from dflash_guard.trust.serving import serving_statement, write_serving
from dflash_guard.urls import is_loopback

if TYPE_CHECKING:
    from dflash_guard.lossless.reference_diff import ReferenceDiffReport

DEFAULT_READY_TIMEOUT_S = 600.0  # vLLM on CPU takes minutes to load and warm up
STOP_GRACE_S = 15.0  # SIGTERM, then SIGKILL
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclasses.dataclass(frozen=True)
class ServedInputs:
    """What the served diff compares the engine with: verified folders, never Hub ids."""

    target: Path  # the safetensors target folder kernels_ref decodes
    drafter: Path | None  # the safetensors drafter folder (None: a --baseline launch)
    gguf: Path | None  # llama.cpp: the target GGUF the engine serves (its tokenizer is checked)


@dataclasses.dataclass(frozen=True)
class ServedSettings:
    """How launch runs and records the served diff."""

    record: Path  # where the serving record is written
    lock_path: Path
    key: Path | None = None  # sign the record with this ECDSA key (`RECORD.sig`)
    approval: Path | None = None  # the approval record launched from (None: the lock alone)
    ruleset_digest: str | None = None  # the confinement ruleset's digest (None: not confined)
    keep_serving: bool = False  # --exec: supervise the engine after a passed diff
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    threads: int | None = None  # torch threads of the reference decode


def served_inputs(lock: Lockfile, plan: LaunchPlan,
                  progress: Progress = NO_PROGRESS) -> ServedInputs | Outcome:
    """The folders the served diff reads: those the plan verified against the lock and gave
    the engine (llama.cpp: the folders of its GGUF files), or the refusal. A llama.cpp drafter
    GGUF locked apart from the safetensors drafter (a `gguf` artifact) has the drafter's folder
    verified here, from --root drafter=DIR or its approved folder."""
    options = plan.options
    target = Path(plan.target.location)
    gguf = None
    if options.engine == "llama.cpp":
        gguf, target = target, target.parent
    if plan.drafter is None:
        return ServedInputs(target, None, gguf)
    drafter = Path(plan.drafter.location)
    if options.engine == "llama.cpp":
        drafter = drafter.parent
    if plan.drafter.role != "drafter":  # a separate GGUF artifact: find the drafter's folder
        artifact = lock.artifact("drafter")
        assert artifact is not None  # every lockfile has one
        approved = options.approved or {}
        root = approved.get("drafter") or options.roots.get("drafter")
        if root is None:
            raise InputError("--verify-served: pass --root drafter=DIR (the drafter's acceptance "
                             "is held against kernels_ref's with the verified drafter folder)")
        verified, folder = verify_folder(lock, artifact, root, progress)
        if folder is None:
            return verified
        drafter = folder
    return ServedInputs(target, drafter, gguf)


def served_endpoint(options: LaunchOptions, timeout: float) -> EngineEndpoint:
    """The endpoint launch started: its port on loopback (a wildcard or outside bind is reached
    on 127.0.0.1), with the key from --api-key-env, its `/metrics` for the drafter check, each
    answer awaited up to `timeout` seconds (the engine's --ready-timeout: a CPU engine on a busy
    machine can take minutes an answer)."""
    host = options.host if is_loopback(options.host) else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{options.port}"
    key_env = options.api_key_env if not is_loopback(options.host) else None
    return EngineEndpoint.from_env(url, api_key_env=key_env, timeout=timeout,
                                   metrics_url=None if options.baseline else url + "/metrics")


# The flag that turns on an engine's Prometheus `/metrics` (vLLM serves it by default): the
# drafter check reads the engine's acceptance counters there.
METRICS_FLAGS = {"llama.cpp": "--metrics", "sglang": "--enable-metrics"}


def with_metrics(command: LaunchCommand) -> LaunchCommand:
    """`command` with the engine's metrics endpoint turned on (a flag that passes after `--`
    anyway: read-only counters on the serving port)."""
    flag = METRICS_FLAGS.get(command.engine)
    if flag is None or flag in command.argv:
        return command
    return dataclasses.replace(command, argv=(*command.argv, flag))


def start_engine(command: LaunchCommand, environ: Mapping[str, str],
                 preexec: Callable[[], None] | None = None,
                 engine_env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the engine in its own session (so its whole group can be stopped), its stdout on
    launch's stderr (launch's stdout is its report); `preexec` runs in the child before exec
    (where a confinement ruleset is applied: launch itself stays unconfined), and `engine_env`
    is set last, after the engine's own setting variables were removed (`resolved`), so the
    confinement's pinned ports and scratch folders hold."""
    argv, env = command.resolved(environ)
    try:
        return subprocess.Popen(argv, env={**env, **(engine_env or {})}, stdout=2,
                                start_new_session=True, preexec_fn=preexec)
    except OSError as error:
        raise InputError(f"cannot run {argv[0]}: {error.strerror}") from None
    except subprocess.SubprocessError as error:  # `preexec` failed in the child
        raise InputError(f"cannot start {argv[0]} confined: {error}") from None


def wait_ready(process: subprocess.Popen[bytes], endpoint: EngineEndpoint,
               timeout_s: float) -> Outcome | None:
    """None once the engine answers `/v1/models`; the refusal when it exits first or is not
    ready within `timeout_s` seconds."""
    probe = dataclasses.replace(endpoint, timeout=min(5.0, timeout_s), retries=0)
    deadline = time.monotonic() + timeout_s
    while True:
        if (code := process.poll()) is not None:
            return Outcome.refused(f"the engine exited ({code}) before it served "
                                   f"{endpoint.shown_url}")
        try:
            with probe.client("engine") as client:
                client.first_model()
            return None
        except EndpointError:
            pass
        if time.monotonic() > deadline:
            return Outcome.refused(f"the engine did not serve {endpoint.shown_url} within "
                                   f"{timeout_s:g} s (--ready-timeout)")
        time.sleep(0.5)


def stop_engine(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """Stop the engine's whole process group: SIGTERM, then SIGKILL after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            continue
    process.wait()


def supervise(process: subprocess.Popen[bytes]) -> int:
    """Pass SIGTERM, SIGINT and SIGHUP on to the engine's group and wait for it: its exit
    status (128 + N when signal N ended it, as a shell reports it)."""
    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    code = process.wait()
    return 128 - code if code < 0 else code


def engine_identity(command: LaunchCommand, environ: Mapping[str, str]) -> dict[str, Any]:
    """What ran: the program by resolved path and sha256 (null: not found on PATH), the
    module a python engine runs, and the command line with variables as names."""
    argv = command.to_json()["argv"]
    assert isinstance(argv, list)
    found = shutil.which(str(argv[0]), path=environ.get("PATH"))
    program = Path(found).resolve() if found else None
    module = argv[2] if len(argv) > 2 and argv[1] == "-m" else None
    return {"name": command.engine,
            "program": str(program) if program else str(argv[0]),
            "digest": {"sha256": sha256_file(program)} if program else None,
            "module": module, "argv": argv}


def diff_served(inputs: ServedInputs, endpoint: EngineEndpoint, policy: Policy,
                threads: int | None, progress: Progress = NO_PROGRESS
                ) -> tuple[Outcome, ReferenceDiffReport | None]:
    """The reference diff with logprobs and the drafter check against the started engine: its
    verdict and the report (None when the engine could not be used)."""
    from dflash_guard.lossless.options import ReferenceOptions
    from dflash_guard.lossless.reference_diff import run_reference_diff

    rules = policy.difftest
    try:
        report = run_reference_diff(ReferenceOptions(
            inputs.target, endpoint, gguf=inputs.gguf, drafter=inputs.drafter,
            prompts=Path(rules.prompts) if rules.prompts else None,
            max_new_tokens=rules.max_new_tokens, threads=threads,
            max_logprob_delta=rules.max_logprob_delta,
            max_logprob_delta_from="policy difftest.max_logprob_delta"), progress)
    except EndpointError as error:
        return Outcome.refused(f"{error} (a served diff that cannot check does not pass)"), None
    return report.outcome("the engine", "; no drafter (--baseline)"), report


def write_record(settings: ServedSettings, lock: Lockfile, policy: Policy, command: LaunchCommand,
                 endpoint: EngineEndpoint, verdict: Outcome, summary: Mapping[str, Any],
                 environ: Mapping[str, str]) -> None:
    """Write (and with a key, sign) the serving record of this launch."""
    from dflash_guard.trust.provenance import sign_approval

    source = settings.approval or settings.lock_path
    digest = sha256_file(source)
    statement = serving_statement(
        authority=(source.name, digest), lock_digest=lock.digest(), policy=policy,
        approval=({"name": source.name, "digest": {"sha256": digest}}
                  if settings.approval is not None else None),
        engine=engine_identity(command, environ), ruleset_digest=settings.ruleset_digest,
        endpoint=endpoint.shown_url, passed=verdict.ok, reason=verdict.reason, diff=summary)
    write_serving(statement, settings.record)
    if settings.key is not None:
        sign_approval(settings.record, key=settings.key)


def serve_verified(lock: Lockfile, policy: Policy, plan: LaunchPlan, command: LaunchCommand,
                   settings: ServedSettings, progress: Progress = NO_PROGRESS, *,
                   environ: Mapping[str, str] | None = None,
                   preexec: Callable[[], None] | None = None,
                   engine_env: Mapping[str, str] | None = None,
                   say: Callable[[str], None] = lambda _line: None) -> tuple[Outcome, int | None]:
    """Start the engine (`start_engine`: `preexec` and `engine_env` are its confinement), diff
    it, write the serving record; stop the engine unless the diff passed and `keep_serving`,
    then supervise it. Returns the verdict and, when supervised, the engine's exit status."""
    environ = os.environ if environ is None else environ
    options = plan.options
    inputs = served_inputs(lock, plan, progress)
    if isinstance(inputs, Outcome):
        return inputs, None
    endpoint = served_endpoint(options, settings.ready_timeout_s)
    if not options.baseline:
        command = with_metrics(command)
    previous = {sig: signal.signal(sig, _stop_launch) for sig in FORWARDED}
    process = start_engine(command, environ, preexec, engine_env)
    try:
        with stage(progress, f"waiting for the engine at {endpoint.shown_url}"):
            verdict: Outcome | None = wait_ready(process, endpoint, settings.ready_timeout_s)
        summary: Mapping[str, Any] = {}
        if verdict is None:
            verdict, report = diff_served(inputs, endpoint, policy, settings.threads, progress)
            summary = report.summary() if report is not None else {}
        verdict = Outcome.refused(f"served diff: {verdict.reason}") if not verdict.ok else \
            Outcome.passed(f"served diff: {verdict.reason}; serving record {settings.record}")
        write_record(settings, lock, policy, command, endpoint, verdict, summary, environ)
        if not (verdict.ok and settings.keep_serving):
            stop_engine(process)
            return verdict, None
        say(f"{verdict.reason}; serving at {endpoint.shown_url} (engine pid {process.pid})")
        return verdict, supervise(process)
    finally:
        if process.poll() is None:  # an error or a signal on the way: never leave it behind
            stop_engine(process)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_confined(lock: Lockfile, policy: Policy, plan: LaunchPlan, command: LaunchCommand,
                   settings: ServedSettings, progress: Progress = NO_PROGRESS, *,
                   required: bool, say: Callable[[str], None] = lambda _line: None
                   ) -> tuple[Outcome, int | None]:
    """`serve_verified` with the engine child under the ruleset `launch --exec` builds
    (`confine.prepare_confinement`: the approved files, the engine's install, its ports),
    applied in the child between fork and exec; the serving record names the ruleset by its
    digest. Where the engine cannot be confined, `required` refuses before anything starts,
    else it runs unconfined after a loud warning and the record says so (digest null)."""
    from dflash_guard.launch.confine import (
        approved_files,
        bytecode_folders,
        prepare_confinement,
        program_path,
    )

    argv, env = command.resolved(os.environ)
    program = program_path(argv[0], env)
    if program is None:
        raise InputError(f"cannot run {argv[0]}: not found on PATH")
    started = prepare_confinement(plan, program, approved_files(lock, plan), required=required,
                                  flag="--verify-served", say=say,
                                  writable=bytecode_folders(argv))
    if isinstance(started, Outcome):
        return started, None
    if started is None:
        return serve_verified(lock, policy, plan, command,
                              dataclasses.replace(settings, ruleset_digest=None), progress,
                              say=say)
    try:
        return serve_verified(lock, policy, plan, command,
                              dataclasses.replace(settings, ruleset_digest=started.digest),
                              progress, preexec=started.built.enforce,
                              engine_env=started.confinement.env, say=say)
    finally:
        started.close()


def _stop_launch(signum: int, _frame: FrameType | None) -> None:
    """Until the engine is supervised, a signal to launch ends it (and stops the engine)."""
    raise SystemExit(128 + signum)
