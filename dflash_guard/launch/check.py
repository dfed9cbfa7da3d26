"""`launch --check ENGINE -- COMMAND...`: lint an existing serve command against a lock and a
policy. Each problem is a scan `Finding` (rules `DG-LAUNCH-*`), reported under the flag it is
about, so the text, JSON and SARIF renderers of `scan` render it.

What is found: a model or drafter that is not the locked one (another repo, a folder whose files
differ from the lock, a path that is not on this machine, a Hub repo id even at the locked commit:
the engine would resolve it in its own cache, so only the verified snapshot folder passes), a Hub
revision that is missing or a branch (`main`) or another commit, trust-remote-code over code the
policy has not approved, a bind outside loopback without an API key, a resource cap of the
policy's `launch` section that is missing or exceeded, a speculative method or token count unlike
the policy's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from dflash_guard import rules
from dflash_guard.errors import InputError
from dflash_guard.findings import Finding
from dflash_guard.launch import passthrough, sglang_parser, vllm_parser
from dflash_guard.launch.engines import FLAGS, cap_flag, parse_args
from dflash_guard.launch.plan import (
    DEFAULT_METHOD,
    ENGINES,
    remote_code_problems,
    verify_folder,
)
from dflash_guard.patterns import COMMIT_RE
from dflash_guard.pins.hashing import hash_files
from dflash_guard.pins.lockfile import Artifact, Lockfile
from dflash_guard.progress import NO_PROGRESS, Progress
from dflash_guard.trust.policy import Policy
from dflash_guard.urls import is_loopback

DETECTOR = "launch-check"
Flags = dict[str, list[str | None]]
SPECULATIVE_KEYS = frozenset({"model", "method", "num_speculative_tokens", "revision",
                              "code_revision"})
# what each engine's check compares with the lock and policy itself (settings names)
COMPARED = {
    "vllm": frozenset({"model", "model_tag", "revision", "tokenizer", "tokenizer_revision",
                       "code_revision", "speculative_config", "trust_remote_code", "host",
                       "port", "api_key"}),
    "llama.cpp": frozenset({"model", "spec_draft_model", "spec_type", "spec_draft_n_max",
                            "host", "port", "api_key", "api_key_file"}),
    "sglang": frozenset({"model_path", "tokenizer_path", "revision", "speculative_algorithm",
                         "speculative_draft_model_path", "speculative_draft_model_revision",
                         "speculative_num_draft_tokens", "speculative_dflash_block_size",
                         "trust_remote_code", "host", "port", "api_key"}),
}
# why a setting that is not passed through matters (the rest: "it may change what is loaded")
WHY = {
    "tokenizer": "another tokenizer (and its chat template) than the locked target's",
    "chat_template": "a chat template other than the one locked with the target",
    "chat_template_file": "a chat template other than the one locked with the target",
    "hf_overrides": "overrides of the locked config.json",
    "hf_config_path": "another config.json than the locked one",
    "load_format": "another weight loader",
    "download_dir": "another download folder, whose files the lock never saw",
    "config": "a config file whose settings apply ahead of the command line",
    "models_preset": "a preset file whose settings apply to the models it loads",
    "model_url": "a download into the --model path at start-up",
    "hf_repo": "a model from the Hub instead of the locked file",
    "spec_draft_hf": "a drafter from the Hub instead of the locked file",
    "docker_repo": "a model from a Docker registry instead of the locked file",
    "lora": "a LoRA adapter over the locked weights",
    "override_kv": "overrides of the locked GGUF metadata",
    "quantization": "another reading of the locked weights",
}
# llama.cpp applies these files before the environment and the command line (common/arg.cpp)



@dataclasses.dataclass(frozen=True)
class LaunchCheckReport:
    """The findings about one command line."""

    engine: str
    command: tuple[str, ...]
    findings: tuple[Finding, ...]
    lock_path: str = "dflash.lock"
    policy_path: str | None = None  # a policy file the user gave (None: a built-in)
    modelfile: str | None = None  # ollama: the Modelfile the findings are about

    @property
    def passed(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine, "command": list(self.command), "passed": self.passed,
                "findings": [f.to_json() for f in self.findings], "summary": self.summary()}

    def artifact_path(self, finding: Finding) -> str:
        """The file a finding about a flag is checked against: the policy file for a cap or
        the speculative settings it sets, else the lockfile."""
        if self.policy_path and finding.rule_id in (rules.LAUNCH_CAPS.id,
                                                    rules.LAUNCH_SPECULATIVE.id):
            return self.policy_path
        return self.modelfile or self.lock_path

    def summary(self) -> str:
        if self.passed:
            return f"launch check: passed ({self.engine}: the command loads what the lock pins)"
        worst = max(f.severity for f in self.findings)
        return (f"launch check: refused ({self.engine}: {len(self.findings)} finding(s), "
                f"worst {worst.name})")


def _finding(rule: rules.Rule, flag: str, message: str) -> Finding:
    return Finding.of(rule, flag, message, detector=DETECTOR)


def _compare(lock: Lockfile, artifact: Artifact, location: str | None, revision: str | None,
             flag: str, revision_flag: str | None, progress: Progress,
             root: Path | None = None) -> list[Finding]:
    """Whether `location` (at `revision`) is the locked `artifact` (hashing a file or folder on
    this machine as a stage of `progress`); with `root` (`--root ROLE=DIR`) it must be in it."""
    if location is None:
        return [_finding(rules.LAUNCH_NOT_LOCKED, flag,
                         f"no {flag}: the {artifact.role} is not named")]
    path = Path(location).expanduser()
    if root is not None and not path.resolve().is_relative_to(root.resolve()):
        return [_finding(rules.LAUNCH_NOT_LOCKED, flag, f"{location} is not the {artifact.role} "
                         f"folder given with --root ({root})")]
    if path.is_file():  # a GGUF file: its sha256 must be a locked file's
        hashed = hash_files([path], progress=progress, stage_name=f"hashing {artifact.role}")
        if hashed[path] in {f.sha256 for f in artifact.files}:
            return []
        return [_finding(rules.LAUNCH_NOT_LOCKED, flag, f"{location}: its sha256 is none of the "
                         f"locked {artifact.role} {artifact.label}'s files")]
    if path.is_dir():
        verified, _ = verify_folder(lock, artifact, path, progress)
        return [] if verified.ok else [_finding(rules.LAUNCH_NOT_LOCKED, flag, verified.reason)]
    if artifact.source != "hub" or (artifact.repo or "").casefold() != location.casefold():
        return [_finding(rules.LAUNCH_NOT_LOCKED, flag,
                         f"{location} is not the locked {artifact.role} ({artifact.label}), nor "
                         "a folder on this machine to verify")]
    where = revision_flag or "a revision"
    if revision is None:
        return [_finding(rules.LAUNCH_UNPINNED, revision_flag or flag,
                         f"{location} without {where}: the engine loads whatever the repo's "
                         f"default branch holds at start-up (the lock pins {artifact.commit})")]
    if not COMMIT_RE.match(revision):
        return [_finding(rules.LAUNCH_UNPINNED, revision_flag or flag,
                         f"{location} at {revision!r}, a branch or tag that can move (the lock "
                         f"pins {artifact.commit})")]
    if revision != artifact.commit:
        return [_finding(rules.LAUNCH_NOT_LOCKED, revision_flag or flag,
                         f"{location} at {revision}, the lock pins {artifact.commit}")]
    # The right repo at the right commit, but the engine resolves it in its HF cache itself,
    # whatever that snapshot holds when it starts (a file added after the lock included).
    return [_finding(rules.LAUNCH_NOT_LOCKED, flag,
                     f"{location} is a Hub repo id: the engine would read whatever its HF cache "
                     f"holds for {artifact.commit[:12] if artifact.commit else 'it'}, which "
                     "nothing verified; name the verified snapshot folder instead (`dflash-guard "
                     "launch` prints its path)")]


def _last(flags: dict[str, list[str | None]], name: str | None) -> str | None:
    """The value the engine uses for `name` (the last one given)."""
    values = flags.get(name or "") or [None]
    return values[-1]


def _drafter(engine: str, flags: dict[str, list[str | None]]
             ) -> tuple[dict[str, object] | None, list[Finding]]:
    """The drafter the command loads: model, revision, method, tokens (None: no drafter)."""
    spec = FLAGS[engine]
    raw = _last(flags, spec.drafter)
    if raw is None:
        return None, []
    if engine != "vllm":
        method = DEFAULT_METHOD if engine == "llama.cpp" else _last(flags, "speculative_algorithm")
        if engine == "llama.cpp" and _last(flags, "spec_type") != "draft-dflash":
            method = _last(flags, "spec_type")
        tokens: str | int | None = _last(flags, spec.tokens)
        if engine == "sglang":  # DFLASH's draft tokens are its block, the root included
            block = _last(flags, "speculative_dflash_block_size") or _last(flags, spec.tokens)
            tokens = int(block) - 1 if block is not None and block.isdigit() else block
        return {"model": raw, "revision": _last(flags, spec.drafter_revision),
                "method": (method or "").lower() or None, "tokens": tokens}, []
    try:
        config = json.loads(raw)
    except ValueError:
        config = None
    if not isinstance(config, dict):
        return None, [_finding(rules.LAUNCH_NOT_LOCKED, "--speculative-config",
                               "not a JSON object: the drafter cannot be checked")]
    extra = sorted(set(config) - SPECULATIVE_KEYS)
    problems = [_finding(rules.LAUNCH_UNLISTED, "--speculative-config",
                         f"speculative config key {key!r} ({config[key]!r}): launch never sets "
                         "it, and it may change what the drafter loads") for key in extra]
    return {"model": config.get("model"), "revision": config.get("revision"),
            "method": config.get("method"),
            "tokens": config.get("num_speculative_tokens")}, problems


def _speculative(policy: Policy, engine: str, drafter: dict[str, object]) -> list[Finding]:
    expected = policy.launch
    if expected is None:
        return []
    flag = "--" + FLAGS[engine].drafter.replace("_", "-")
    found = []
    if expected.speculative_method and drafter["method"] != expected.speculative_method:
        found.append(_finding(rules.LAUNCH_SPECULATIVE, flag, f"speculative method "
                              f"{drafter['method']!r}, the policy expects "
                              f"{expected.speculative_method!r}"))
    tokens = drafter["tokens"]
    if expected.num_speculative_tokens and str(tokens) != str(expected.num_speculative_tokens):
        block = (f" (SGLang's --speculative-num-draft-tokens is the block, the policy's tokens "
                 f"plus one: {expected.num_speculative_tokens + 1})" if engine == "sglang" else "")
        found.append(_finding(rules.LAUNCH_SPECULATIVE, flag, f"{tokens} speculative tokens, the "
                              f"policy expects {expected.num_speculative_tokens}{block}"))
    return found


def _caps(policy: Policy, engine: str, flags: dict[str, list[str | None]]) -> list[Finding]:
    caps = policy.launch.caps.get(engine, {}) if policy.launch else {}
    found = []
    for name, cap in sorted(caps.items()):
        given = _last(flags, name)
        try:
            value = float(given) if given is not None else None
        except ValueError:
            value = None
        if value is None:
            found.append(_finding(rules.LAUNCH_CAPS, cap_flag(name), f"{cap_flag(name)} is not set "
                                  f"(the policy caps it at {cap})"))
        elif value > cap:
            found.append(_finding(rules.LAUNCH_CAPS, cap_flag(name), f"{cap_flag(name)} {given} is "
                                  f"over the policy's cap of {cap}"))
    return found


def _bind(engine: str, flags: dict[str, list[str | None]]) -> list[Finding]:
    host = _last(flags, "host") or FLAGS[engine].default_host
    if is_loopback(host) or _last(flags, "api_key") or _last(flags, "api_key_file"):
        return []
    unset = "" if "host" in flags else f" (no --host: {engine} binds {host})"
    key_env = FLAGS[engine].key_env
    note = f"; a key in {key_env} is not visible to this check" if key_env else ""
    return [_finding(rules.LAUNCH_EXPOSED, "--host",
                     f"binds {host}{unset} without --api-key: anyone who reaches the port can "
                     f"use the model{note}")]


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _vllm_args(command: list[str]) -> tuple[list[str], bool]:
    """The arguments of a vLLM serve command after its program, and whether it is `vllm serve`
    (which loads the positional model; the api_server module ignores one)."""
    if len(command) >= 2 and Path(command[0]).name == "vllm" and command[1] == "serve":
        return command[2:], True
    if "-m" in command[1:3]:
        index = command.index("-m")
        if command[index + 1:index + 2] in (["vllm.entrypoints.openai.api_server"],
                                            ["vllm.entrypoints.launchers.api_server.entry"]):
            return command[index + 2:], False
    raise InputError("launch --check vllm: expected `vllm serve ...` or `python -m "
                     "vllm.entrypoints.openai.api_server ...`")


def _config_files(command: list[str]) -> list[str]:
    """The `--config FILE` arguments of a vLLM or SGLang command (`--config=FILE` too)."""
    found = []
    for index, token in enumerate(command):
        if token == "--config" and index + 1 < len(command):
            found.append(command[index + 1])
        elif token.startswith("--config="):
            found.append(token.split("=", 1)[1])
    return found


def _unlisted(name: str, value: object, flag: str | None = None) -> Finding:
    why = WHY.get(name, "it may change what is loaded or how code is trusted")
    where = flag or "--" + name.replace("_", "-")
    return _finding(rules.LAUNCH_UNLISTED, where, f"{where} resolves to {_text(value)}: {why}; "
                    "launch does not pass it through")


def _vllm_flags(python: str, command: list[str], allowed: frozenset[str]
                ) -> tuple[Flags, list[Finding]]:
    """The command's settings as the pinned vLLM's parser resolves them (those it changes from
    the defaults, plus the model), and a finding per setting launch would not pass through."""
    args, serve = _vllm_args(command)
    resolved = vllm_parser.resolve(python, args)
    if resolved.values is None:
        return {}, [_finding(rules.LAUNCH_UNLISTED, command[0], f"vLLM's own parser refuses "
                             f"the command: {resolved.error}")]
    passed = {dest for spelling, (dest, _) in resolved.options.items()
              if spelling in passthrough.VLLM_FLAGS}
    changed = resolved.changed()
    tag = changed.pop("model_tag", None)
    model = tag if serve and tag is not None else resolved.values.get("model")
    flags: Flags = {name: [_text(value)] for name, value in changed.items()}
    flags["model"] = [_text(model)] if model is not None else [None]
    found = []
    if tag is not None and (not serve or "model" in changed):
        found.append(_finding(rules.LAUNCH_UNLISTED, "--model", f"a positional model {tag!r} "
                              "beside --model: which one loads depends on the entry point"))
    found += [_finding(rules.LAUNCH_UNLISTED, "--config", f"--config {path}: a config file's "
                      "settings apply ahead of the command line, and it can change between this "
                      "check and the engine's start") for path in _config_files(command)]
    if changed.get("tokenizer") not in (None, model):
        found.append(_unlisted("tokenizer", changed["tokenizer"]))
    found += [_unlisted(name, value) for name, value in sorted(changed.items())
              if name not in COMPARED["vllm"] | passed | allowed]
    return flags, found


def _sglang_args(command: list[str]) -> tuple[list[str], bool]:
    """The arguments of an SGLang serve command after its program, and whether it is `sglang
    serve` (which takes a positional model and `--model-type`)."""
    if len(command) >= 2 and Path(command[0]).name == "sglang" and command[1] == "serve":
        return command[2:], True
    if "-m" in command[1:3]:
        index = command.index("-m")
        if command[index + 1:index + 2] == ["sglang.launch_server"]:
            return command[index + 2:], False
    raise InputError("launch --check sglang: expected `sglang serve ...` or `python -m "
                     "sglang.launch_server ...`")


def _sglang_flags(python: str, command: list[str], allowed: frozenset[str]
                  ) -> tuple[Flags, list[Finding]]:
    """The command's settings as the pinned SGLang's parser resolves them (those it changes
    from the defaults, plus the model), and a finding per setting launch would not pass
    through."""
    args, serve = _sglang_args(command)
    resolved = sglang_parser.resolve(python, args, serve=serve)
    if resolved.values is None:
        return {}, [_finding(rules.LAUNCH_UNLISTED, command[0], f"SGLang's own parser refuses "
                             f"the command: {resolved.error}")]
    passed = {dest for spelling, (dest, _) in resolved.options.items()
              if spelling in passthrough.SGLANG_FLAGS}
    changed = resolved.changed()
    model = resolved.values.get("model_path")
    flags: Flags = {name: [_text(value)] for name, value in changed.items()}
    flags["model_path"] = [_text(model)] if model is not None else [None]
    found = []
    if serve and resolved.backend not in ("auto", "llm"):
        found.append(_finding(rules.LAUNCH_UNLISTED, "--model-type", f"--model-type "
                              f"{resolved.backend}: another serving backend than the language "
                              "model server this check resolves"))
    found += [_finding(rules.LAUNCH_UNLISTED, "--config", f"--config {path}: a config file's "
                      "settings apply ahead of the command line, and it can change between this "
                      "check and the engine's start") for path in _config_files(command)]
    found += [_unlisted(name, value) for name, value in sorted(changed.items())
              if name not in COMPARED["sglang"] | passed | allowed]
    return flags, found


def _llamacpp_flags(command: list[str], allowed: frozenset[str]) -> tuple[Flags, list[Finding]]:
    """A llama.cpp command's flags by settings name (every alias through the pinned tree's
    table), and a finding per flag launch would not pass through."""
    flags, _ = parse_args("llama.cpp", command[1:])
    known = {o.key for o in passthrough.LLAMACPP_SPELLINGS.values()}
    found = []
    for name, values in sorted(flags.items()):
        if name in COMPARED["llama.cpp"] | passthrough.LLAMACPP_KEYS | allowed:
            continue
        if name not in known:
            found.append(_finding(rules.LAUNCH_UNLISTED, "--" + name.replace("_", "-"),
                                  "not an option of the pinned llama-server"))
        else:
            found.append(_unlisted(name, values[-1] if values[-1] is not None else True))
    found += [_finding(rules.LAUNCH_UNLISTED, str(path), "llama.cpp applies this config "
                       "file's settings ahead of the command line")
              for path in passthrough.llamacpp_config_files()]
    return flags, found


def check_command(lock: Lockfile, policy: Policy, engine: str, command: list[str],
                  progress: Progress = NO_PROGRESS, *, python: str | None = None,
                  roots: Mapping[str, Path] | None = None) -> LaunchCheckReport:
    """Lint `command` (a serve command line of `engine`) against `lock` and `policy`; hashing
    the files and folders it names is a stage of `progress` each. A vLLM or SGLang command is
    resolved by that engine's parser in `python` (default python3); `roots` (ROLE -> DIR) are
    where the locked artifacts are on this machine: the command must load them from there."""
    if engine not in ENGINES:
        raise InputError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if not command:
        raise InputError("launch --check: give the command after `--`")
    roots = roots or {}
    unknown = sorted(set(roots) - {a.role for a in lock.artifacts})
    if unknown:
        raise InputError(f"--root {unknown[0]}=...: the lockfile has no artifact with that role")
    if engine == "ollama":  # a Modelfile, read with ollama's own grammar
        from dflash_guard.launch.ollama import lint_modelfile

        if len(command) != 1:
            raise InputError("launch --check ollama: give one Modelfile path")
        _, found = lint_modelfile(lock, policy, Path(command[0]), roots, progress)
        return LaunchCheckReport(engine, tuple(command), tuple(found), modelfile=command[0])
    spec = FLAGS[engine]
    caps = frozenset(policy.launch.caps.get(engine, {}) if policy.launch else ())
    if engine == "vllm":
        flags, findings = _vllm_flags(python or "python3", command, caps)
    elif engine == "sglang":
        flags, findings = _sglang_flags(python or "python3", command, caps)
    else:
        flags, findings = _llamacpp_flags(command, caps)
    target, drafter_artifact = lock.artifact("target"), lock.artifact("drafter")
    assert target is not None and drafter_artifact is not None  # every lockfile has both
    if engine == "llama.cpp" and lock.artifact("gguf") is not None:
        drafter_artifact = lock.artifact("gguf")
    assert drafter_artifact is not None
    model = _last(flags, spec.model)
    revision_flag = "--" + spec.revision.replace("_", "-") if spec.revision else None
    findings += _compare(lock, target, model, _last(flags, spec.revision),
                         "--" + spec.model.replace("_", "-"), revision_flag, progress,
                         roots.get("target"))
    tokenizer = _last(flags, "tokenizer_path") if engine == "sglang" else None
    if tokenizer is not None and tokenizer != model:  # the tokenizer is locked with the target
        findings += _compare(lock, target, tokenizer, None, "--tokenizer-path", None, progress,
                             roots.get("target"))
    for name in ("tokenizer_revision", "code_revision"):
        given = _last(flags, name)
        if given and given != target.commit:
            findings.append(_finding(rules.LAUNCH_NOT_LOCKED, "--" + name.replace("_", "-"),
                                     f"{given}, the lock pins {target.commit}"))
    drafter, problems = _drafter(engine, flags)
    findings += problems
    loaded = ["target"]
    if drafter is not None:
        loaded.append(drafter_artifact.role)
        flag = "--" + spec.drafter.replace("_", "-")
        revision = drafter["revision"]
        findings += _compare(lock, drafter_artifact, str(drafter["model"] or "") or None,
                             str(revision) if revision is not None else None, flag, flag,
                             progress, roots.get(drafter_artifact.role))
        findings += _speculative(policy, engine, drafter)
    if "trust_remote_code" in flags:
        findings += [_finding(rules.LAUNCH_REMOTE_CODE, "--trust-remote-code", problem)
                     for problem in remote_code_problems(lock, policy, loaded)]
    findings += _bind(engine, flags)
    findings += _caps(policy, engine, flags)
    return LaunchCheckReport(engine, tuple(command), tuple(findings))
