"""What an engine must load to serve exactly what a lock pins, or why it must not start.

Every artifact is loaded from a folder verified file by file against the lock first: the folder
given with `--root ROLE=DIR`, else (a Hub artifact) its HF-cache snapshot at the locked commit.
The engine is handed the folder's path (llama.cpp: the GGUF file in it), never a repo id and a
revision it would resolve in a cache itself, so a file added to the snapshot after the lock is a
refusal, not a file the engine reads. From an approval record (`launch --approval`) the folders
are the ones `verify-approval` walked. Remote code is trusted only when asked for and when the
policy approves every `.py` file of the loaded artifacts by sha256 (or its tier allows any). A
bind outside loopback needs an API key from an environment variable. A refusal is an `Outcome`
(exit 1), returned instead of the plan; what stops the planning itself (a missing folder, a bad
option) is an `InputError`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Mapping
from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input_json
from dflash_guard.launch.passthrough import llamacpp_config_files
from dflash_guard.outcome import Outcome
from dflash_guard.pins.fileset import llamacpp_problems, served_gguf, vllm_problems
from dflash_guard.pins.lockfile import Artifact, Lockfile
from dflash_guard.pins.verify import verify_lock
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.trust.evidence import artifact_key, served_gguf_problems
from dflash_guard.trust.policy import ENV_NAME_RE, Policy, RemoteCode
from dflash_guard.urls import is_loopback

ENGINES = ("vllm", "llama.cpp", "sglang", "ollama")
GGUF_ENGINES = ("llama.cpp", "ollama")  # load one GGUF file (ollama: llama-server inside)
DEFAULT_METHOD = "dflash"


@dataclasses.dataclass(frozen=True)
class Load:
    """Where the engine loads one locked artifact from: the path of its verified folder (or,
    for llama.cpp, of the GGUF file in it)."""

    role: str
    location: str


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """What the caller asked for, beyond the lock and the policy."""

    engine: str
    roots: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8000
    api_key_env: str | None = None
    trust_remote_code: bool = False
    baseline: bool = False  # the target alone: the endpoint diff's baseline
    num_speculative_tokens: int | None = None
    program: str | None = None  # the python (vllm, sglang) or llama-server binary to run
    extra: tuple[str, ...] = ()  # engine arguments after `--`, none of them a controlled flag
    # from a verified approval record: role -> the folder `verify-approval` walked (None: each
    # folder is verified against the lock here)
    approved: Mapping[str, Path] | None = None
    template: Path | None = None  # ollama: the reviewed Go template the Modelfile carries
    modelfile: Path | None = None  # ollama: where the Modelfile is written


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """Everything a command line is written from."""

    options: LaunchOptions
    target: Load
    drafter: Load | None
    trust_remote_code: bool
    method: str
    num_speculative_tokens: int | None
    caps: Mapping[str, int | float]
    api_key_env: str | None  # set only when the bind is not loopback
    verified: tuple[str, ...]  # `ROLE FOLDER` of each folder verified against the lock


def remote_code_problems(lock: Lockfile, policy: Policy, roles: list[str]) -> list[str]:
    """Why the loaded artifacts' remote code may not be trusted (empty: it may)."""
    problems = []
    for artifact in (a for a in lock.artifacts if a.role in roles):
        # launch checks no lockfile signature, so no hub-confirmed claim counts (as in an
        # unsigned lock at the gate)
        tier = policy.artifact_tier(artifact, provenance_trusted=False)
        rule = policy.rule(tier).remote_code
        if artifact.code_refs:
            problems.append(f"{artifact.role} {artifact.label} takes code from "
                            f"{artifact.code_refs[0].repo}, which no engine flag can pin")
        if rule is RemoteCode.deny:
            problems.append(f"the policy denies remote code for the {tier} tier "
                            f"({artifact.role} {artifact.label})")
        elif rule is RemoteCode.reviewed_only:
            problems += [f"{artifact.role}/{f.path} (sha256 {f.sha256[:12]}) is not in the "
                         "policy's reviewed_code (`dflash-guard review` writes a policy that "
                         "lists it)"
                         for f in artifact.files
                         if f.path.endswith(".py") and f.sha256 not in policy.reviewed_sha256]
    return problems


def verify_folder(lock: Lockfile, artifact: Artifact, root: Path | None,
                  progress: Progress = NO_PROGRESS) -> tuple[Outcome, Path | None]:
    """Refused unless `root` (None: a Hub artifact's HF-cache snapshot at its locked commit)
    holds exactly the locked files of `artifact` (its hashing a stage of `progress`); with the
    folder that was verified."""
    report = verify_lock(dataclasses.replace(lock, artifacts=(artifact,)),
                         {artifact.role: root} if root is not None else {}, progress=progress)
    where = report.locations.get(artifact.role, root)
    if not report.passed:
        listed = "; ".join(f"{p.path}: {p.kind}" for p in report.problems[:5])
        more = f" (and {len(report.problems) - 5} more)" if len(report.problems) > 5 else ""
        return Outcome.refused(f"{artifact.role} folder {where} does not match the lock: "
                               f"{listed}{more}"), None
    return Outcome.passed(f"{artifact.role} folder {where} matches the lock"), where


def _load(lock: Lockfile, policy: Policy, artifact: Artifact, options: LaunchOptions,
          progress: Progress) -> Load | Outcome:
    """Where `artifact` is loaded from: a folder verified against the lock (or the refusal)."""
    if options.approved is not None:  # verify-approval walked every locked folder
        folder = options.approved.get(artifact.role)
        if folder is None:
            return Outcome.refused(f"{artifact.role} {artifact.label}: the approval's check "
                                   "verified no folder for it")
    else:
        root = options.roots.get(artifact.role)
        if root is None and artifact.source == "local":
            raise InputError(f"{artifact.role} was locked from a local folder "
                             f"({artifact.name!r}): pass --root {artifact.role}=DIR")
        verified, folder = verify_folder(lock, artifact, root, progress)
        if folder is None:
            return verified
    path, locked = folder.resolve(), {f.path for f in artifact.files}
    if options.engine in GGUF_ENGINES:  # llama.cpp loads one file (and its split parts)
        gguf = served_gguf(locked)
        ggufs = sorted(p for p in locked if p.endswith(".gguf"))
        if gguf is None:
            return Outcome.refused(f"{artifact.role} {artifact.label} locks {len(ggufs)} "
                                   ".gguf files; llama.cpp needs exactly one model (a split "
                                   "model's parts count as one)")
        if options.engine == "ollama" and len(ggufs) > 1:
            return Outcome.refused(f"{artifact.role} {artifact.label} is a split GGUF: ollama "
                                   "copies only the one file FROM or DRAFT names")
        problems = llamacpp_problems(artifact.role, path / gguf, locked)
        if (artifact.role == "target" and policy.gguf_requires_comparison and policy.waiver(
                "gguf-comparison", artifact_key(artifact), dt.date.today()) is None):
            # what llama.cpp serves as --model must be what a comparison record compared
            problems += served_gguf_problems(policy, lock, path)
        path = path / gguf
    else:
        problems = vllm_problems(artifact.role, path, locked) if options.engine == "vllm" else []
    if problems:
        return Outcome.refused("; ".join(problems))
    return Load(artifact.role, str(path))


def _api_key_env(options: LaunchOptions) -> str | None | Outcome:
    """The variable holding the API key: required (and set) when the bind is not loopback."""
    if is_loopback(options.host):
        return None
    if options.engine == "ollama":
        return Outcome.refused(f"--host {options.host} is not loopback, and ollama's server "
                               "checks no API key: bind 127.0.0.1 and put an authenticating "
                               "proxy in front")
    name = options.api_key_env
    if name is None:
        return Outcome.refused(f"--host {options.host} is not loopback: the server would answer "
                               "anyone who reaches it; pass --api-key-env NAME (a variable "
                               "holding the key)")
    if not ENV_NAME_RE.match(name):
        raise InputError(f"--api-key-env {name!r}: not an environment variable name")
    if not os.environ.get(name):
        return Outcome.refused(f"--api-key-env {name}: the variable is unset or empty")
    return name


def _block_tokens(load: Load) -> int | None:
    """The draft tokens per step the drafter was trained for (its block size less the anchor,
    what llama.cpp clamps to), read from its verified folder's config.json (None: no folder)."""
    if not Path(load.location).is_dir():
        return None
    config = read_input_json(Path(load.location) / "config.json", "drafter config.json")
    nested = config.get("dflash_config") if isinstance(config, dict) else None
    block = nested.get("block_size") if isinstance(nested, dict) else None
    if block is None and isinstance(config, dict):
        block = config.get("block_size")
    if not isinstance(block, int) or isinstance(block, bool) or block < 2:
        raise InputError(f"{load.location}/config.json has no block_size of 2 or more: give "
                         "--num-speculative-tokens N")
    return block - 1


def plan_launch(lock: Lockfile, policy: Policy, options: LaunchOptions,
                progress: Progress = NO_PROGRESS) -> LaunchPlan | Outcome:
    """Resolve `lock` and `policy` into a `LaunchPlan`, or the refusal (an `Outcome`), or
    raise `InputError`; verifying a local folder is a stage of `progress` (`hashing ROLE`)."""
    if options.engine not in ENGINES:
        raise InputError(f"engine {options.engine!r}: expected one of {', '.join(ENGINES)}")
    unknown = sorted(set(options.roots) - {a.role for a in lock.artifacts})
    if unknown:
        raise InputError(f"--root {unknown[0]}=...: the lockfile has no artifact with that role")
    rules = policy.launch
    method = (rules.speculative_method if rules and rules.speculative_method else DEFAULT_METHOD)
    target = lock.artifact("target")
    drafter = lock.artifact("gguf") if options.engine in GGUF_ENGINES else None
    drafter = drafter or lock.artifact("drafter")
    assert target is not None and drafter is not None  # every lockfile has both
    if options.engine in GGUF_ENGINES and not options.baseline and method != DEFAULT_METHOD:
        return Outcome.refused(f"the policy's speculative_method {method!r}: "
                               f"{options.engine} serves DFlash drafters only (draft-dflash)")
    if options.engine == "llama.cpp" and (configs := llamacpp_config_files()):
        return Outcome.refused(f"{configs[0]}: llama.cpp applies this config file's settings "
                               "ahead of the command line; remove it to launch what is locked")
    loaded = [target] if options.baseline else [target, drafter]
    loads = []
    for artifact in loaded:
        planned = _load(lock, policy, artifact, options, progress)
        if isinstance(planned, Outcome):
            return planned
        loads.append(planned)
    trust = False
    if options.trust_remote_code:
        if options.engine in GGUF_ENGINES:
            raise InputError(f"--trust-remote-code: {options.engine} runs no Python model code")
        problems = remote_code_problems(lock, policy, [a.role for a in loaded])
        if problems:
            return Outcome.refused("--trust-remote-code: " + "; ".join(problems))
        trust = True
    tokens = options.num_speculative_tokens or (rules.num_speculative_tokens if rules else None)
    if tokens is not None and rules and rules.num_speculative_tokens not in (None, tokens):
        return Outcome.refused(f"--num-speculative-tokens {tokens}: the policy's launch section "
                               f"sets {rules.num_speculative_tokens}")
    if tokens is None and not options.baseline and options.engine not in GGUF_ENGINES:
        tokens = _block_tokens(loads[1])
        if tokens is None:
            raise InputError(f"give --num-speculative-tokens N (or launch.num_speculative_tokens "
                             f"in the policy): the drafter {drafter.label} is not in a folder "
                             "whose block size could be read")
    key_env = _api_key_env(options)
    if isinstance(key_env, Outcome):
        return key_env
    return LaunchPlan(
        options=options,
        target=loads[0],
        drafter=None if options.baseline else loads[1],
        trust_remote_code=trust,
        method=method,
        num_speculative_tokens=None if options.baseline else tokens,
        caps=dict(rules.caps.get(options.engine, {})) if rules else {},
        api_key_env=key_env,
        verified=tuple(f"{load.role} {load.location}" for load in loads),
    )
