"""ollama: `launch ollama` writes the Modelfile that serves what the lock pins; `launch --check
ollama MODELFILE` lints one read with ollama's own grammar (`ollama_modelfile.py`).

ollama serves a model `ollama create NAME -f Modelfile` copied into its blob store (by sha256);
from v0.32.7 its `DRAFT` command names a drafter GGUF, and a draft GGUF of architecture `dflash`
is run by its bundled llama-server as `--spec-type draft-dflash` with `--spec-draft-n-max` the
`draft_num_predict` parameter (ollama `llm/llama_server.go`; the parameter's default is 4).

The written Modelfile has `FROM` the locked target GGUF and `DRAFT` the locked drafter GGUF, each
by the absolute path of its verified folder, `TEMPLATE` a Go template whose sha256 is on the
policy's `reviewed_templates`, `PARAMETER draft_num_predict` (the speculative tokens) and the
policy's `launch.ollama` caps, nothing else. The lint refuses: a FROM or DRAFT that is not the
locked GGUF (by sha256, and by resolved path under `--root`), a name ollama would pull from a
registry, a folder, ADAPTER, RENDERER, PARSER, SYSTEM, MESSAGE, a TEMPLATE that is missing or
not reviewed, a PARAMETER neither launch writes nor a resource setting passes, a cap missing or
exceeded. Both refuse a locked GGUF that `ollama create` would change (`create_problems`).
ollama has no API key: `launch ollama` binds loopback only.
"""

from __future__ import annotations

import hashlib
import math
import os
import pwd
from collections.abc import Mapping
from pathlib import Path

from dflash_guard import rules
from dflash_guard.errors import InputError
from dflash_guard.fileio import open_binary, read_input, write_atomic
from dflash_guard.findings import Finding
from dflash_guard.launch.engines import LaunchCommand
from dflash_guard.launch.ollama_modelfile import Command, ModelfileError, decode, parse, render
from dflash_guard.launch.plan import LaunchPlan
from dflash_guard.outcome import Outcome
from dflash_guard.pins.fileset import served_gguf
from dflash_guard.pins.hashing import hash_files
from dflash_guard.pins.lockfile import Artifact, Lockfile
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.trust.policy import Policy
from kernels_ref.gguf_reader import GGUFError, read_gguf

MAX_MODELFILE_BYTES = 4 * 1024 * 1024  # a Modelfile is its commands and a template
MAX_TEMPLATE_BYTES = 1024 * 1024
DRAFT_TOKENS = "draft_num_predict"
# PARAMETERs that change neither what is loaded nor what is generated (as LLAMACPP_KEYS)
PASSTHROUGH = frozenset({"num_ctx", "num_batch", "num_thread", "num_gpu", "main_gpu", "use_mmap"})
ONCE = ("model", "draft", "template")  # ollama merges two FROMs' files; the last TEMPLATE wins
HARMLESS = frozenset({"license", "requires"})
WHY = {
    "adapter": "a LoRA adapter over the locked weights",
    "renderer": "a built-in prompt renderer in place of the reviewed TEMPLATE",
    "parser": "a built-in output parser that rewrites what the model generated",
    "system": "a system prompt added to every request the endpoint diff did not send",
    "message": "messages prepended to every conversation the endpoint diff did not send",
}
SHOWN = {"model": "FROM"}
DETECTOR = "launch-check"
# `ollama create` gives a target of these architectures a built-in renderer and parser, which
# render prompts instead of the TEMPLATE (server/create.go)
RENDERED = frozenset({"gemma4", "laguna", "nemotron_h", "nemotron_h_moe", "nemotron_h_omni"})


def create_problems(role: str, path: Path) -> list[str]:
    """Why `ollama create` would not serve the GGUF at `path` (of `role`) as the lock has it:
    a header ollama's reader would refuse too, a target it renders with a built-in renderer in
    place of the TEMPLATE, or quantizes to Q8_0 itself (`source_quantization: hf_fp8`), a
    drafter whose architecture is not `dflash` (ollama would run it as an MTP draft)."""
    try:
        with open_binary(path) as handle, read_gguf(handle) as gguf:
            arch = gguf.value("general.architecture")
            source = gguf.value("source_quantization") if gguf.find(
                "source_quantization") is not None and role == "target" else None
            fp8 = gguf.find("source_fp8_tensors") is not None
    except (GGUFError, OSError) as error:
        return [f"{role} {path.name}: its GGUF header cannot be read ({error})"]
    if role != "target":
        return [] if arch == "dflash" else [
            f"{role} {path.name}: architecture {arch!r}, not 'dflash': ollama would run it as "
            "an MTP draft (draft-mtp), not a DFlash drafter"]
    problems = []
    if arch in RENDERED:
        problems.append(f"target {path.name}: ollama renders a {arch} model with its built-in "
                        "renderer, not the reviewed TEMPLATE")
    if source == "hf_fp8" and fp8:
        problems.append(f"target {path.name}: ollama quantizes a GGUF with source FP8 tensors "
                        "to Q8_0 when it creates the model, so it would not serve these bytes")
    return problems


def model_name(lock: Lockfile, baseline: bool) -> str:
    """The name `ollama create` gives the model: the lock's digest, so the name says what it is."""
    name = "dflash-guard-" + lock.digest().removeprefix("sha256:")[:12]
    return name + "-baseline" if baseline else name


def reviewed_template(policy: Policy, path: Path | None) -> str | Outcome:
    """The Go template in `path` (UTF-8), or the refusal: none given, or its sha256 not on the
    policy's `reviewed_templates`."""
    if path is None:
        raise InputError("launch ollama: give --template FILE (the reviewed Go template the "
                         "Modelfile's TEMPLATE carries; without it ollama picks one itself)")
    try:
        text = read_input(path, "template", MAX_TEMPLATE_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"--template {path}: not UTF-8 text") from None
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest not in policy.reviewed_template_sha256:
        return Outcome.refused(f"--template {path} (sha256 {digest[:12]}) is not on the "
                               "policy's reviewed_templates")
    return text


def modelfile_commands(plan: LaunchPlan, template: str) -> list[Command]:
    """The Modelfile serving `plan`: FROM, DRAFT, TEMPLATE, the draft tokens (0 for the
    baseline) and the caps."""
    commands = [Command("model", plan.target.location)]
    if plan.drafter is not None:
        commands.append(Command("draft", plan.drafter.location))
    commands.append(Command("template", template))
    if plan.drafter is None:  # the baseline: 0 also stops the MTP drafting ollama would start
        commands.append(Command(DRAFT_TOKENS, "0"))  # for a target GGUF with MTP layers
    elif plan.num_speculative_tokens is not None:
        commands.append(Command(DRAFT_TOKENS, str(plan.num_speculative_tokens)))
    commands += [Command(name, str(value)) for name, value in sorted(plan.caps.items())]
    return commands


def write_modelfile(plan: LaunchPlan, template: str, path: Path, name: str
                    ) -> LaunchCommand | Outcome:
    """Write the Modelfile of `plan` to `path` (atomically; never over an input) and return the
    `ollama create NAME` command that loads it, or the refusal: what `ollama create` would
    change (`create_problems`), or a file ollama would read back as other commands (a path or
    template its quoting cannot carry)."""
    loads = [plan.target] if plan.drafter is None else [plan.target, plan.drafter]
    problems = [p for load in loads for p in create_problems(
        "target" if load is plan.target else "drafter", Path(load.location))]
    if problems:
        return Outcome.refused("; ".join(problems))
    commands = modelfile_commands(plan, template)
    text = render(commands)
    try:
        same = parse(text) == commands
    except ModelfileError:
        same = False
    if not same:
        return Outcome.refused("the Modelfile cannot be written so that ollama reads back the "
                               "same paths and template (a value its quoting cannot carry)")
    write_atomic(path, text)
    options = plan.options
    host = f"{options.host}:{options.port}"
    argv = ("env", f"OLLAMA_HOST={host}", options.program or "ollama", "create", name, "-f",
            str(path.resolve()))
    return LaunchCommand("ollama", argv, {})


def _finding(rule: rules.Rule, where: str, message: str) -> Finding:
    return Finding.of(rule, where, message, detector=DETECTOR)


def expand_path(value: str, relative_dir: Path) -> Path:
    """ollama's `expandPath`: absolute as it is, `~` and `~user` from the account's home folder
    (the password database, not $HOME), anything else relative to the Modelfile's folder."""
    if value.startswith(("/", "\\")):
        return Path(os.path.abspath(value))
    if value.startswith("~"):
        user, _, rest = value[1:].partition("/")
        try:
            entry = pwd.getpwnam(user) if user else pwd.getpwuid(os.getuid())  # as Go's user
            home = entry.pw_dir
        except KeyError:
            raise InputError(f"{value}: no user {user!r} (ollama would refuse it too)") from None
        return Path(os.path.abspath(os.path.join(home, rest)))
    return Path(os.path.abspath(relative_dir / value))


def _locked_gguf(lock: Lockfile, artifact: Artifact, where: str, value: str, relative_dir: Path,
                 root: Path | None, progress: Progress) -> list[Finding]:
    """Whether `value` (a FROM or DRAFT) names the locked GGUF of `artifact`: a file whose
    sha256 is the locked one and, with `root`, the very file in that folder."""
    gguf = served_gguf(f.path for f in artifact.files)
    if gguf is None:
        return [_finding(rules.LAUNCH_NOT_LOCKED, where, f"the lock's {artifact.role} "
                         f"{artifact.label} holds no single GGUF for ollama to load")]
    path = expand_path(value, relative_dir)
    if not path.exists():
        return [_finding(rules.LAUNCH_NOT_LOCKED, where, f"{value}: no such file here, so "
                         "ollama reads it as a model name and pulls it from a registry, not "
                         f"the locked {artifact.role} GGUF")]
    if not path.is_file():
        return [_finding(rules.LAUNCH_NOT_LOCKED, where, f"{value}: not a file (ollama picks a "
                         f"folder's files by pattern); name the locked {gguf}")]
    resolved = path.resolve()
    if root is not None and resolved != (root / gguf).resolve():
        return [_finding(rules.LAUNCH_NOT_LOCKED, where, f"{value} resolves to {resolved}, not "
                         f"the locked {gguf} of the {artifact.role} folder given with --root "
                         f"({root})")]
    locked = next(f.sha256 for f in artifact.files if f.path == gguf)
    digest = hash_files([resolved], progress=progress, stage_name=f"hashing {artifact.role}")
    if digest[resolved] != locked:
        return [_finding(rules.LAUNCH_NOT_LOCKED, where, f"{value}: its sha256 "
                         f"{digest[resolved][:12]} is not the locked {artifact.role} {gguf} "
                         f"({locked[:12]})")]
    role = "target" if artifact.role == "target" else "drafter"
    return [_finding(rules.LAUNCH_NOT_LOCKED, where, problem)
            for problem in create_problems(role, resolved)]


def _parameters(policy: Policy, commands: list[Command]) -> list[Finding]:
    """PARAMETERs: the draft tokens as the policy sets them, caps within the policy's, resource
    settings; anything else changes what is generated."""
    rules_ = policy.launch
    caps = rules_.caps.get("ollama", {}) if rules_ else {}
    tokens = rules_.num_speculative_tokens if rules_ else None
    found: list[Finding] = []
    given = {c.name: c.args for c in commands}
    has_draft = "draft" in given
    for command in commands:
        name, value = command.name, command.args
        if name in (*ONCE, *HARMLESS, *WHY):
            continue
        where = f"PARAMETER {name}"
        if name == DRAFT_TOKENS:
            if tokens is not None and has_draft and value != str(tokens):
                found.append(_finding(rules.LAUNCH_SPECULATIVE, where, f"{value} draft tokens, "
                                      f"the policy expects {tokens}"))
        elif name in caps:
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number) or number > caps[name]:
                found.append(_finding(rules.LAUNCH_CAPS, where, f"{value} is over the policy's "
                                      f"cap of {caps[name]}"))
        elif name not in PASSTHROUGH:
            found.append(_finding(rules.LAUNCH_UNLISTED, where, f"{value!r}: launch does not "
                                  "write this parameter, and it may change what is generated"))
    found += [_finding(rules.LAUNCH_CAPS, f"PARAMETER {name}", f"not set (the policy caps it "
                       f"at {cap})") for name, cap in sorted(caps.items()) if name not in given]
    if has_draft and tokens is not None and DRAFT_TOKENS not in given:
        found.append(_finding(rules.LAUNCH_SPECULATIVE, f"PARAMETER {DRAFT_TOKENS}", "not set: "
                              f"ollama drafts 4 tokens, the policy expects {tokens}"))
    return found


def lint_modelfile(lock: Lockfile, policy: Policy, path: Path,
                   roots: Mapping[str, Path] | None = None,
                   progress: Progress = NO_PROGRESS) -> tuple[tuple[str, ...], list[Finding]]:
    """The commands of the Modelfile at `path` (as ollama's grammar reads them, each as its
    line) and the findings about it; a file ollama would not parse is an `InputError`."""
    data = read_input(path, "Modelfile", MAX_MODELFILE_BYTES)
    try:
        commands = parse(decode(data))
    except InputError as error:
        raise InputError(f"Modelfile {path}: ollama's parser refuses it: {error}") from None
    roots = roots or {}
    relative_dir = Path(os.path.abspath(path)).parent  # ollama: filepath.Dir(filename)
    target, drafter = lock.artifact("target"), lock.artifact("gguf") or lock.artifact("drafter")
    assert target is not None and drafter is not None  # every lockfile has both
    findings: list[Finding] = []
    for name in ONCE:
        count = sum(c.name == name for c in commands)
        if count > 1:
            shown = SHOWN.get(name, name.upper())
            findings.append(_finding(rules.LAUNCH_UNLISTED, shown, f"{count} {shown} commands: "
                                     "ollama merges or overrides them; give one"))
    for command in commands:
        if command.name == "model":
            findings += _locked_gguf(lock, target, "FROM", command.args, relative_dir,
                                     roots.get(target.role), progress)
        elif command.name == "draft":
            findings += _locked_gguf(lock, drafter, "DRAFT", command.args, relative_dir,
                                     roots.get(drafter.role), progress)
        elif command.name == "template":
            digest = hashlib.sha256(command.args.encode()).hexdigest()
            if digest not in policy.reviewed_template_sha256:
                findings.append(_finding(rules.LAUNCH_UNLISTED, "TEMPLATE", f"sha256 "
                                         f"{digest[:12]} is not on the policy's "
                                         "reviewed_templates"))
        elif command.name in WHY:
            findings.append(_finding(rules.LAUNCH_UNLISTED, command.name.upper(),
                                     f"{WHY[command.name]}; launch never writes it"))
    if not any(c.name == "template" for c in commands):
        findings.append(_finding(rules.LAUNCH_UNLISTED, "TEMPLATE", "missing: ollama would "
                                 "derive a template from the GGUF itself, which nobody "
                                 "reviewed"))
    findings += _parameters(policy, commands)
    return tuple(str(c) for c in commands), findings
