"""Which engine arguments `launch` passes through after `--`, and which environment it clears.

An allowlist per engine: flags that change neither what is loaded nor how code is trusted (caps,
logging, dtype, eager mode, thread counts). Everything else is refused with the reason: a flag
launch sets itself, a config file (vLLM `--config`), a dotted argument (vLLM merges
`--speculative-config.model X` into the JSON launch wrote), a positional, an abbreviation
(argparse expands `--tok` to `--tokenizer`), or any flag not on the list. llama.cpp's spellings
come from the table generated from the pinned tree (`llamacpp_flags.py`), so every alias of a
flag (`-md`, `--spec-draft-model`, `--model-draft`) is the same flag here.

The engines also take settings from the environment (vLLM's `VLLM_*` variables, llama.cpp's
`LLAMA_ARG_*` and every variable its table names); `clean_environment` removes them before
`launch --exec` starts the engine, keeping a short list of vLLM variables that change neither.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path

from dflash_guard.launch.llamacpp_flags import OPTIONS as LLAMACPP_OPTIONS

NUMBER_RE = re.compile(r"-?\d+(\.\d+)?$")


@dataclasses.dataclass(frozen=True)
class Option:
    """One engine option: its settings name (`key`) and how many values it takes."""

    key: str
    values: int


def _key(spelling: str) -> str:
    return spelling.lstrip("-").replace("-", "_")


def _llamacpp_spellings() -> dict[str, Option]:
    """Every spelling llama-server takes -> its option (keyed by its first `--` spelling)."""
    table: dict[str, Option] = {}
    for names, negated, values, _env in LLAMACPP_OPTIONS:
        key = _key(next((n for n in names if n.startswith("--")), names[0]))
        for spelling in (*names, *negated):
            table[spelling] = Option(key, values)
    return table


LLAMACPP_SPELLINGS = _llamacpp_spellings()

# llama.cpp options (by key) that pass through: threads, batching, context and slot counts,
# flash attention, KV cache types, logging, timeouts, the web UI and metrics endpoints.
LLAMACPP_KEYS = frozenset({
    "threads", "threads_batch", "ctx_size", "batch_size", "ubatch_size", "parallel",
    "cont_batching", "flash_attn", "seed", "gpu_layers", "predict", "cache_type_k",
    "cache_type_v", "kv_offload", "warmup", "perf", "cache_prompt", "timeout", "threads_http",
    "metrics", "ui", "log_disable", "verbosity", "verbose", "log_prefix", "log_timestamps",
    "log_colors", "spec_draft_ngl", "spec_draft_threads", "spec_draft_threads_batch",
    "sleep_idle_seconds",
})

# vLLM spellings that pass through, and their value counts (tests/launch/test_passthrough.py
# checks each against the pinned vLLM's own parser).
VLLM_FLAGS: Mapping[str, int] = {
    "--dtype": 1, "--enforce-eager": 0, "--no-enforce-eager": 0, "--seed": 1,
    "--max-num-seqs": 1, "--max-model-len": 1, "--max-num-batched-tokens": 1,
    "--gpu-memory-utilization": 1, "--tensor-parallel-size": 1, "-tp": 1,
    "--pipeline-parallel-size": 1, "-pp": 1, "--block-size": 1, "--max-logprobs": 1,
    "--enable-prefix-caching": 0, "--no-enable-prefix-caching": 0, "--disable-log-stats": 0,
    "--enable-log-requests": 0, "--no-enable-log-requests": 0, "--uvicorn-log-level": 1,
    "--disable-uvicorn-access-log": 0, "--max-log-len": 1, "--served-model-name": 1,
}

# SGLang spellings of the same kinds (tests/launch/test_launch_check_sglang.py checks each
# against the pinned SGLang's own parser)
SGLANG_FLAGS: Mapping[str, int] = {
    "--dtype": 1, "--random-seed": 1, "--max-running-requests": 1, "--mem-fraction-static": 1,
    "--context-length": 1, "--tp-size": 1, "--log-level": 1, "--disable-cuda-graph": 0,
    "--enable-metrics": 0, "--chunked-prefill-size": 1,
}

# vLLM variables kept when launch execs the engine: resources, process layout (the CPU
# model running in the engine core's process), telemetry opt-outs, logging
VLLM_ENV_KEEP = frozenset({
    "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK", "VLLM_LOGGING_LEVEL",
})
LLAMACPP_ENV = frozenset(env for *_, env in LLAMACPP_OPTIONS if env)


def normalized(engine: str, token: str) -> str:
    """A flag token as the engine reads it: vLLM turns `_` into `-` before the first `.` and
    splits `--x=v`; llama.cpp turns `_` into `-` in `--` flags and has no `=` form."""
    if not token.startswith("--"):
        return token
    if engine == "llama.cpp":
        return token.replace("_", "-")
    name = token.split("=", 1)[0]
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail


def option(engine: str, spelling: str) -> Option | None:
    """The pass-through option `spelling` names on `engine` (None: not on the list)."""
    if engine == "llama.cpp":
        found = LLAMACPP_SPELLINGS.get(spelling)
        return found if found is not None and found.key in LLAMACPP_KEYS else None
    flags = VLLM_FLAGS if engine == "vllm" else SGLANG_FLAGS
    values = flags.get(spelling)
    return None if values is None else Option(_key(spelling), values)


def key_of(engine: str, spelling: str) -> str:
    """The settings name of any spelling (llama.cpp: through its table)."""
    found = LLAMACPP_SPELLINGS.get(spelling) if engine == "llama.cpp" else None
    return found.key if found is not None else _key(spelling)


def refusal(engine: str, extra: list[str], controlled: frozenset[str]) -> str | None:
    """Why the engine arguments `extra` may not be passed (None: they may); `controlled` are
    the keys launch sets itself (or the policy caps)."""
    index = 0
    while index < len(extra):
        token = extra[index]
        index += 1
        if not token.startswith("-") or token in ("-", "--"):
            return (f"{token!r} after `--`: a positional argument (vLLM reads one as the model) "
                    "is never passed through")
        name = normalized(engine, token)
        if engine != "llama.cpp" and "." in name:
            return (f"{token} after `--`: a dotted argument is merged into the JSON setting it "
                    "names, over what launch wrote")
        if name in ("--config", "--models-preset"):
            return f"{token} after `--`: a config file can re-set what launch controls"
        if engine == "llama.cpp" and "=" in token:
            return f"{token} after `--`: llama.cpp has no `--flag=value` form"
        key = key_of(engine, name)
        if key in controlled:
            return (f"engine argument --{key.replace('_', '-')} ({token}) after `--`: launch sets "
                    "it from the lock and policy (or refuses it)")
        found = option(engine, name)
        if found is None:
            return (f"{token} after `--`: not on launch's pass-through list for {engine} (caps, "
                    "logging, dtype, eager mode; see docs/vllm.md): it may change what is "
                    "loaded or how code is trusted")
        if "=" in token:
            if found.values != 1:
                return f"{token} after `--`: {name} takes no value"
            continue
        for _ in range(found.values):
            if index >= len(extra):
                return f"{token} after `--`: needs a value"
            value = extra[index]
            if value.startswith("-") and not NUMBER_RE.match(value):
                return f"{token} {value} after `--`: a flag where {token} needs its value"
            index += 1
    return None


def clean_environment(engine: str, environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without the variables through which `engine` takes settings."""
    def kept(name: str) -> bool:
        if engine == "vllm":
            return not name.startswith("VLLM_") or name in VLLM_ENV_KEEP
        if engine == "llama.cpp":
            return not name.startswith("LLAMA_ARG_") and name not in LLAMACPP_ENV
        return not name.startswith("SGLANG_")
    return {name: value for name, value in environ.items() if kept(name)}


def llamacpp_config_files() -> list[Path]:
    """The config files llama.cpp on this machine would apply before its command line
    (`/etc/llama.cpp/config.ini`, `${XDG_CONFIG_HOME:-~/.config}/llama.cpp/config.ini`)."""
    user = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return [p for p in (Path("/etc/llama.cpp/config.ini"), user / "llama.cpp" / "config.ini")
            if p.exists()]
