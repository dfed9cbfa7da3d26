"""What a launched engine may touch, as a Landlock ruleset, and the confined exec.

The engine may read exactly the approved files (one rule per file, on the file the path
resolves to: an HF-cache snapshot's links point at blobs) and list their folders; read and
execute its own install (the program's folder, the venv it is in, the Python install the venv's
interpreter links to) and the system's folders; read `/proc`, `/sys` and `/dev`; write only to
a scratch folder made for it (its `TMPDIR`, `HOME` and every cache folder the engines' libraries
take from the environment: `CACHE_VARIABLES`, so an inherited `TORCHINDUCTOR_CACHE_DIR` never
points the engine at a folder it may not write), `/dev/shm` and `/dev/null`; bind TCP on
its serving port and its internal ports, which are pinned through the engine's own settings, and
connect only to those internal ports. Measured on this project's machine:
../shared/docs/engine-confinement.md (vLLM needs `/dev/null` writable, a pinned `VLLM_PORT`
range, and bind on port 0 for gloo's device probe).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NoReturn

from dflash_guard.errors import InputError
from dflash_guard.launch.engines import LaunchCommand
from dflash_guard.launch.landlock import (
    ALL_FS,
    READ,
    READ_EXEC,
    BuiltRuleset,
    Fs,
    LandlockError,
    Net,
    PathRule,
    PortRule,
    Ruleset,
    abi_version,
    merged,
)
from dflash_guard.launch.plan import LaunchPlan
from dflash_guard.outcome import Outcome
from dflash_guard.pins.fileset import FileSetError, engine_files
from dflash_guard.pins.lockfile import Lockfile

SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc")
READ_ONLY = ("/proc", "/sys", "/dev")
# Where the engines' libraries write, read from the environment the engine inherits; each is
# pointed into the scratch folder. torch's inductor sets `TORCHINDUCTOR_CACHE_DIR` process-wide
# the first time it compiles (`/tmp/torchinductor_USER`), so a launch from a process that ever
# compiled handed the engine that folder, and its first compile at serving time failed (EACCES).
CACHE_VARIABLES = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TORCHINDUCTOR_CACHE_DIR",
                   "TRITON_CACHE_DIR", "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT", "HF_HOME")
VLLM_PORTS = 16  # internal ports from VLLM_PORT on (API server, engine core, gloo, ...)
PROFILES = ("vllm", "llama.cpp")  # engines whose confinement was measured


@dataclasses.dataclass(frozen=True)
class Confinement:
    """The ruleset an engine runs under and the variables that go with it."""

    ruleset: Ruleset
    env: Mapping[str, str]  # set in the engine's environment (TMPDIR, HOME, VLLM_PORT)
    scratch: Path


def approved_files(lock: Lockfile, plan: LaunchPlan) -> list[Path]:
    """The files a confined engine may read: of each folder the plan verified against the lock
    and loads, the locked files the engine's own loaders open (`pins.fileset`: its weight
    selection, config, tokenizer and template files, every part of a split GGUF). A locked file
    the engine would not open stays unreadable to it; one it would open that the lock lacks was
    refused by the plan, and is left out here too, so the engine fails on it (EACCES)."""
    files: list[Path] = []
    if plan.options.engine not in PROFILES:  # `unconfinable`: it runs unconfined or not at all
        return files
    for load in (plan.target, plan.drafter):
        artifact = lock.artifact(load.role) if load is not None else None
        if load is None or artifact is None:
            continue
        try:
            opened = engine_files(plan.options.engine, load.role, Path(load.location))
        except FileSetError as error:  # the plan checked it; a folder changed since
            raise InputError(f"{load.role}: {error}") from None
        locked = {file.path for file in artifact.files}
        prefix = _locked_prefix(opened.folder, Path(load.location), locked)
        files += [opened.folder / name for name in opened.loaded if prefix + name in locked]
    return files


def _locked_prefix(folder: Path, location: Path, locked: set[str]) -> str:
    """Where `folder` sits inside the locked artifact ('' for its root; llama.cpp's GGUF may lie
    in a subfolder of the locked folder, as `gguf/target.gguf`)."""
    if location.is_dir():
        return ""
    parts = location.as_posix().split("/")
    for start in range(len(parts) - 1, 0, -1):
        if "/".join(parts[start:]) in locked:
            inner = "/".join(parts[start:-1])
            return inner + "/" if inner else ""
    return ""


def unconfinable(plan: LaunchPlan) -> str | None:
    """Why `plan` cannot run confined (None: it can)."""
    if plan.options.engine not in PROFILES:
        return (f"no confinement profile for {plan.options.engine} (measured: "
                f"{', '.join(PROFILES)})")
    abi = abi_version()
    if abi is None:
        return "this kernel has no Landlock (Linux 5.13 or later with the LSM enabled)"
    if abi < 4:
        return f"this kernel's Landlock (ABI {abi}) has no TCP rules (ABI 4, Linux 6.7)"
    return None


def install_folders(program: Path) -> list[Path]:
    """What runs the engine, to read and execute: the program's folder, the venv it is in, and
    the install a Python program links to (its prefix, where its standard library is)."""
    folders = [program.parent]
    if (program.parent.parent / "pyvenv.cfg").is_file():
        folders.append(program.parent.parent)
    real = program.resolve()
    folders.append(real.parent.parent if real.name.startswith("python") else real.parent)
    return folders


def file_rules(files: Iterable[Path]) -> list[PathRule]:
    """Read on each file (the file its path resolves to) and listing of its folder."""
    rules = []
    for path in files:
        absolute = Path(os.path.abspath(path))
        rules += [PathRule(str(absolute.resolve()), Fs.READ_FILE),
                  PathRule(str(absolute.parent.resolve()), Fs.READ_DIR)]
    return rules


def engine_ruleset(engine: str, program: Path, files: Iterable[Path], port: int,
                   scratch: Path, writable: Iterable[Path] = ()) -> Ruleset:
    """The ruleset of `engine` run as `program`, reading `files`, serving on `port`, writing
    `scratch` (and `writable`: folders launch made for it, as a fresh bytecode folder)."""
    rules = [PathRule(p, READ_EXEC) for p in SYSTEM if os.path.isdir(p)]
    rules += [PathRule(p, READ) for p in READ_ONLY if os.path.isdir(p)]
    rules += [PathRule(str(p), READ_EXEC) for p in install_folders(program)]
    rules += [PathRule(str(scratch), ALL_FS), PathRule("/dev/null", Fs.READ_FILE | Fs.WRITE_FILE)]
    rules += [PathRule(str(p), ALL_FS) for p in writable]
    if os.path.isdir("/dev/shm"):
        rules.append(PathRule("/dev/shm", ALL_FS))
    rules += file_rules(files)
    ports = [PortRule(port, Net.BIND_TCP)]
    if engine == "vllm":
        ports += [PortRule(p, Net.BIND_TCP | Net.CONNECT_TCP)
                  for p in internal_ports(engine, port)]
        ports.append(PortRule(0, Net.BIND_TCP))  # gloo binds an ephemeral port to probe
    return Ruleset(merged(rules), tuple(ports))


def internal_ports(engine: str, port: int) -> range:
    """The internal ports `engine` is pinned to (VLLM_PORT on for vLLM; none for llama.cpp)."""
    if engine != "vllm":
        return range(0)
    base = port + 1 if port + VLLM_PORTS < 65536 else port - VLLM_PORTS
    return range(base, base + VLLM_PORTS)


def confinement(engine: str, program: Path, files: Iterable[Path], port: int,
                writable: Iterable[Path] = ()) -> Confinement:
    """A fresh scratch folder and the ruleset and variables of `engine` confined to it (and to
    writing `writable`)."""
    scratch = Path(tempfile.mkdtemp(prefix="dflash-guard-engine-"))
    (scratch / "tmp").mkdir()
    (scratch / "home").mkdir()
    env = {"TMPDIR": str(scratch / "tmp"), "HOME": str(scratch / "home")}
    env |= {name: str(scratch / "home" / "cache" / name.lower()) for name in CACHE_VARIABLES}
    if engine == "vllm":
        env["VLLM_PORT"] = str(internal_ports(engine, port).start)
    return Confinement(engine_ruleset(engine, program, files, port, scratch, writable), env,
                       scratch)


def bytecode_folders(argv: Iterable[str]) -> list[Path]:
    """The fresh bytecode folders a proved Python engine is given (`-X pycache_prefix=DIR`,
    `engine_identity`): written by the engine, or every import would compile anew. Only the
    interpreter's own options count (before `-m`), never an engine argument."""
    args = list(argv)
    options = args[1:args.index("-m")] if "-m" in args else []
    return [Path(value.removeprefix("pycache_prefix="))
            for flag, value in itertools.pairwise(options)
            if flag == "-X" and value.startswith("pycache_prefix=")]


def program_path(name: str, environ: Mapping[str, str]) -> Path | None:
    """`name` as the exec would find it on the engine's PATH, absolute (None: not found)."""
    found = shutil.which(name, path=environ.get("PATH", os.defpath))
    return Path(os.path.abspath(found)) if found else None


@dataclasses.dataclass
class ConfinedStart:
    """A confinement built for one engine start: `built.enforce` restricts the engine's
    process before it execs, `confinement.env` goes into its environment last."""

    confinement: Confinement
    built: BuiltRuleset

    @property
    def digest(self) -> str:
        """The ruleset's digest, as a serving record names it."""
        return self.confinement.ruleset.digest

    def close(self) -> None:
        """Close the ruleset and remove the scratch folder (after the engine stopped)."""
        self.built.close()
        shutil.rmtree(self.confinement.scratch, ignore_errors=True)


def prepare_confinement(plan: LaunchPlan, program: Path, files: Iterable[Path], *,
                        required: bool, flag: str, say: Callable[[str], None],
                        writable: Iterable[Path] = ()) -> ConfinedStart | Outcome | None:
    """The built confinement of the engine `plan` runs as `program`, reading `files` (writing
    `writable`, `bytecode_folders`): the
    refusal where the engine cannot be confined (`unconfinable`) and `required`, or where the
    ruleset cannot be built (an approved file gone); None, after a loud warning, where it runs
    unconfined. `flag` names the option the refusal is about (`--exec`, `--verify-served`)."""
    why = unconfinable(plan)
    if why is not None:
        if required:
            return Outcome.refused(f"{flag}: the policy requires confinement and {why}")
        say(f"WARNING: the engine runs UNCONFINED, with every file and port this user has: {why}")
        return None
    confined = confinement(plan.options.engine, program, files, plan.options.port, writable)
    try:
        built = confined.ruleset.build()
    except LandlockError as error:
        shutil.rmtree(confined.scratch, ignore_errors=True)
        return Outcome.refused(f"{flag}: the engine's ruleset cannot be built: {error}")
    say(f"dflash-guard: the engine runs confined (Landlock ABI {built.abi}, ruleset "
        f"{confined.ruleset.digest}, scratch {confined.scratch})")
    return ConfinedStart(confined, built)


def exec_engine(command: LaunchCommand, plan: LaunchPlan, files: Iterable[Path],
                required: bool, say: Callable[[str], None]) -> Outcome:
    """Replace this process with the engine of `command`, confined to reading `files`; what
    returns is the refusal. Where the engine cannot be confined (`unconfinable`), `required`
    refuses and otherwise it runs unconfined after a warning; a ruleset that cannot be built
    (an approved file gone) always refuses."""
    argv, env = command.resolved(os.environ)
    program = program_path(argv[0], env)
    if program is None:
        raise InputError(f"cannot run {argv[0]}: not found on PATH")
    started = prepare_confinement(plan, program, files, required=required, flag="--exec",
                                  say=say, writable=bytecode_folders(argv))
    if isinstance(started, Outcome):
        return started
    if started is not None:
        started.built.enforce()
        env = {**env, **started.confinement.env}
    _exec(program, argv, env)


def _exec(program: Path, argv: list[str], env: Mapping[str, str]) -> NoReturn:
    try:
        os.execve(program, argv, env)
    except OSError as error:
        raise InputError(f"cannot run {program}: {error.strerror}") from None
