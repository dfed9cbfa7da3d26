"""Does the drafter fit its target: a DFlash drafter's `config.json` against its target's
(`--target`), and the target's token table for the mask check.

Rules: DG-DRAFTER-ARCH (unknown architecture/model_type, medium), DG-DRAFTER-MASK (mask_token_id
missing, outside the vocabulary, or equal to a pad/eos/bos/stop id of the target: high),
DG-DRAFTER-LAYERS (target_layer_ids out of range or num_target_layers disagreeing, high),
DG-DRAFTER-SHAPE (hidden_size/vocab_size/head_dim incompatible, high), DG-DRAFTER-BLOCK
(block_size outside 2..64, medium), DG-DRAFTER-PARAMS (parameter budget exceeded, medium),
DG-DRAFTER-CONFLICT (a field set differently at the top level and in `dflash_config`, high),
DG-DRAFTER-CONV-SELECTOR (a `DFlash2DraftModel`'s convolution/selector fields unusable, high),
DG-CONFIG-INVALID (a config that cannot be read, medium).

Where engines read fields: SGLang gives `dflash_config` precedence over the top level, so the
nested value is the one checked; a target whose settings sit under `text_config` (Qwen3.5 style)
is read there; a target with no layer count anywhere is reported, never silently skipped.

The token table (the target's and the drafter's, read from every tokenizer file): a mask token must
not reuse an id the target gives meaning to: pad/eos/bos/unk/stop ids (`config.json`,
`generation_config.json`), special tokens named in `tokenizer_config.json` or
`special_tokens_map.json`, tokens marked special in `tokenizer.json`'s `added_tokens` or in
`added_tokens_decoder`, and the control tokens a chat template writes (`<|im_start|>`). A token
whose text says it is a mask token is the intended one, not an alias.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dflash_guard import fileio, rules
from dflash_guard.findings import Finding
from dflash_guard.rules import Rule
from dflash_guard.scan.tokens import int_ids, ordinary_token, read_json, token_table, token_text
from dflash_guard.scan.weights.finite import finite_findings
from dflash_guard.scan.weights.safetensors import Header
from dflash_guard.severity import Severity
from kernels_ref.compat import compatibility_problems, dflash_field

DETECTOR = "drafter-config"
Config = dict[str, Any]  # a parsed config.json: any JSON under its keys
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_PROJECTION = re.compile(r"(?:^|\.)layers\.\d+\.self_attn\.([qkvo])_proj\.weight$")
KNOWN_ARCHITECTURES = frozenset({"DFlashDraftModel", "DFlash2DraftModel"})
DEFAULT_PARAM_BUDGET = 3_000_000_000
BLOCK_RANGE = (2, 64)
# The rule of each `kernels_ref.compat` problem code.
COMPAT_RULES = {
    "mask_token_id": rules.DRAFTER_MASK,
    "target_layer_ids": rules.DRAFTER_LAYERS,
    "num_target_layers": rules.DRAFTER_LAYERS,
    "hidden_size": rules.DRAFTER_SHAPE,
    "vocab_size": rules.DRAFTER_SHAPE,
}


def is_drafter_config(config: object) -> bool:
    """Whether a `config.json` describes a DFlash drafter."""
    if not isinstance(config, dict):
        return False
    names = [str(a) for a in config.get("architectures") or [] if isinstance(a, str)]
    return (
        "dflash_config" in config
        or any("dflash" in n.lower() for n in names)
        or ("dflash" in str(config.get("model_type", "")).lower())
    )


def _load(path: Path) -> tuple[Config | None, str | None]:
    if not path.is_file():
        return None, None
    try:
        value = fileio.read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return None, f"{path.name} is not readable JSON: {error}"
    return (value if isinstance(value, dict) else None), None


def check_drafter(
    drafter_dir: Path,
    display: str,
    *,
    target: Path | None,
    param_count: int | None,
    param_budget: int | None,
    shapes: dict[str, list[int]] | None = None,
    weights: list[tuple[Path, str, Header]] | None = None,
) -> list[Finding]:
    """Findings for the drafter config in `drafter_dir` (reported under `display`); `shapes`:
    the folder's safetensors tensor shapes, against which the declared layers are checked;
    `weights`: its complete safetensors files (path, display, header), read in full to hold
    every float finite."""

    def finding(rule: Rule, severity: Severity, message: str) -> Finding:
        return Finding(rule.id, severity, display, message, detector=DETECTOR)

    config, error = _load(drafter_dir / "config.json")
    if error or config is None:
        return [finding(rules.CONFIG_INVALID, Severity.medium, error or "no config.json")]
    findings: list[Finding] = []
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not KNOWN_ARCHITECTURES.intersection(
        a for a in architectures if isinstance(a, str)
    ):
        findings.append(
            finding(
                rules.DRAFTER_ARCH,
                Severity.medium,
                f"architectures {architectures!r} is not a known DFlash drafter "
                f"({', '.join(sorted(KNOWN_ARCHITECTURES))})",
            )
        )
    nested = config.get("dflash_config")
    dflash: Config = nested if isinstance(nested, dict) else {}
    findings += [
        finding(rules.DRAFTER_CONFLICT, Severity.high, m) for m in _conflicts(config, dflash)
    ]
    block = dflash.get("block_size", config.get("block_size"))
    if not isinstance(block, int) or not BLOCK_RANGE[0] <= block <= BLOCK_RANGE[1]:
        findings.append(
            finding(
                rules.DRAFTER_BLOCK,
                Severity.medium,
                f"block_size {block!r} is outside {BLOCK_RANGE[0]}..{BLOCK_RANGE[1]}",
            )
        )
    if isinstance(architectures, list) and "DFlash2DraftModel" in architectures:
        findings.extend(
            finding(rules.DRAFTER_CONV_SELECTOR, severity, message)
            for severity, message in _dflash2_problems(config, dflash, block)
        )
    findings.extend(
        finding(rule, severity, message)
        for rule, severity, message in _weight_problems(config, shapes or {})
        + _head_problems(config, shapes or {})
    )
    findings += finite_findings(weights or [], rules.DRAFTER_WEIGHTS, DETECTOR,
                                "the drafter accepts nothing wherever it loads")
    budget = DEFAULT_PARAM_BUDGET if param_budget is None else param_budget
    if param_count is not None and param_count > budget:
        findings.append(
            finding(
                rules.DRAFTER_PARAMS,
                Severity.medium,
                f"{param_count:,} parameters exceed the budget of {budget:,}",
            )
        )
    target_config: Config = {}
    if target is not None:
        loaded, error = _load(target / "config.json")
        if error or loaded is None:
            findings.append(
                finding(
                    rules.CONFIG_INVALID, Severity.medium, f"target: {error or 'no config.json'}"
                )
            )
            loaded = {}
        target_config = flat_target(loaded)
        if not isinstance(target_config.get("num_hidden_layers"), int):
            findings.append(finding(
                rules.DRAFTER_LAYERS, Severity.medium,
                "the target's config.json has no num_hidden_layers (top level or text_config): "
                "target_layer_ids cannot be checked",
            ))
    folders = [drafter_dir, *([target] if target else [])]
    config, mask_reported = _with_resolved_mask(config, folders, findings, finding)
    findings.extend(  # with no target, only the mask token is checked (against its own vocab)
        finding(COMPAT_RULES[problem.code], Severity.high, problem.message)
        for problem in compatibility_problems(config, target_config)
        if not (mask_reported and problem.code == "mask_token_id")
    )
    findings.extend(
        finding(rule, severity, message)
        for rule, severity, message in _layer_problems(config, target_config)
    )
    if target is None:
        return findings
    mask = dflash_field(config, "mask_token_id")
    if isinstance(mask, int):
        reserved = reserved_token_ids(target)
        if mask in reserved:
            findings.append(
                finding(
                    rules.DRAFTER_MASK,
                    Severity.high,
                    f"mask_token_id {mask} aliases the target's {reserved[mask]}: "
                    "acceptance erodes and engines may stop on it",
                )
            )
        elif (ordinary := ordinary_token(read_json(target / "tokenizer.json"),
                                         mask)) is not None:
            findings.append(
                finding(
                    rules.DRAFTER_MASK,
                    Severity.high,
                    f"mask_token_id {mask} is the ordinary token {ordinary!r} of the target's "
                    "vocabulary, which plain text encodes to: a mask must be a dedicated token "
                    "(added, special or unused), or acceptance quietly erodes",
                )
            )
    findings.extend(
        finding(rule, severity, message)
        for rule, severity, message in _shape_problems(config, target_config)
    )
    return findings


def _weight_problems(
    config: Config, shapes: dict[str, list[int]]
) -> list[tuple[Rule, Severity, str]]:
    """The declared layers against the weights: `layers.N.` tensors for exactly N in
    0..num_hidden_layers-1, and `fc` taking len(target_layer_ids) * hidden_size inputs (how
    the reference drafter builds it). Nothing to compare without safetensors weights."""
    if not shapes:
        return []
    problems: list[tuple[Rule, Severity, str]] = []
    declared = config.get("num_hidden_layers")
    found = sorted({int(m.group(1)) for name in shapes if (m := _LAYER.search(name))})
    if not isinstance(declared, int) or isinstance(declared, bool):
        problems.append((rules.DRAFTER_LAYERS, Severity.high,
                         f"num_hidden_layers {declared!r} is not an integer; the weights hold "
                         f"{len(found)} layers"))
    elif found != list(range(declared)):
        problems.append((rules.DRAFTER_LAYERS, Severity.high,
                         f"num_hidden_layers is {declared} but the weights hold layers "
                         f"{_ranges(found)}: loaders build one and load the other"))
    layer_ids = dflash_field(config, "target_layer_ids")
    hidden = config.get("hidden_size")
    fc = next((shape for name, shape in shapes.items()
               if name == "fc.weight" or name.endswith(".fc.weight")), None)
    if fc is not None and isinstance(layer_ids, list) and isinstance(hidden, int):
        expected = [hidden, len(layer_ids) * hidden]
        if fc != expected:
            problems.append((rules.DRAFTER_SHAPE, Severity.high,
                             f"fc.weight is {fc} but {len(layer_ids)} target_layer_ids of "
                             f"hidden_size {hidden} need {expected}"))
    return problems


def _head_problems(
    config: Config, shapes: dict[str, list[int]]
) -> list[tuple[Rule, Severity, str]]:
    """Head counts as the loaders build attention from them (z-lab's drafter and kernels_ref:
    `num_key_value_groups = heads // kv_heads`; q/o projections `heads * head_dim` wide, k/v
    `kv_heads * head_dim`), then each layer's projection in the weights against them."""
    heads, hidden = _count(config.get("num_attention_heads")), _count(config.get("hidden_size"))
    kv = _count(config.get("num_key_value_heads", heads))  # transformers' default: no grouping
    if "num_key_value_heads" in config and kv is None:
        return [(rules.DRAFTER_SHAPE, Severity.high, f"num_key_value_heads "
                 f"{config['num_key_value_heads']!r} is not a positive integer")]
    if heads is None or hidden is None or kv is None:
        return []
    if heads % kv:
        return [(rules.DRAFTER_SHAPE, Severity.high,
                 f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}: "
                 "grouped attention cannot share the key/value heads (kernels_ref refuses it)")]
    head_dim = _head_dim(config)
    if head_dim is None or not shapes:
        return []
    expected = {"q": [heads * head_dim, hidden], "k": [kv * head_dim, hidden],
                "v": [kv * head_dim, hidden], "o": [hidden, heads * head_dim]}
    problems: list[tuple[Rule, Severity, str]] = []
    seen: set[str] = set()
    for name, shape in sorted(shapes.items()):
        match = _PROJECTION.search(name)
        if match is None or match.group(1) in seen or shape == expected[match.group(1)]:
            continue
        seen.add(match.group(1))
        problems.append((rules.DRAFTER_SHAPE, Severity.high,
                         f"{name} is {shape} but num_attention_heads {heads}, "
                         f"num_key_value_heads {kv} and head_dim {head_dim} over hidden_size "
                         f"{hidden} need {expected[match.group(1)]}: the loader refuses it"))
    return problems


def _count(value: object) -> int | None:
    """A positive integer field, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _ranges(values: list[int]) -> str:
    if not values:
        return "none"
    return f"{values[0]}..{values[-1]} ({len(values)})" if values == list(
        range(values[0], values[-1] + 1)) else str(values[:16])


def _shape_problems(config: Config, target: Config) -> list[tuple[Rule, Severity, str]]:
    problems: list[tuple[Rule, Severity, str]] = []
    head_dim = config.get("head_dim")
    heads = config.get("num_attention_heads")
    hidden = config.get("hidden_size")
    if (
        isinstance(heads, int) and heads > 0
        and isinstance(hidden, int) and hidden > 0
        and head_dim is None
        and (hidden % heads)
    ):
        problems.append(
            (
                rules.DRAFTER_SHAPE,
                Severity.high,
                f"hidden_size {hidden} is not divisible by num_attention_heads {heads}",
            )
        )
    if not target:
        return problems
    mine, theirs = _head_dim(config), _head_dim(target)
    if mine is None or theirs is None:  # a field missing on one side is a finding, not a skip
        side = "the drafter's" if mine is None else "the target's"
        problems.append((rules.DRAFTER_SHAPE, Severity.medium,
                         f"{side} head_dim cannot be read (no head_dim, and no hidden_size and "
                         "num_attention_heads to derive it): the two cannot be compared"))
    elif mine != theirs:
        problems.append((rules.DRAFTER_SHAPE, Severity.medium,
                         f"head_dim {mine} != the target's {theirs}"))
    return problems


def _head_dim(config: Config) -> int | None:
    """`head_dim`, else hidden_size // num_attention_heads (what transformers derives)."""
    value = config.get("head_dim")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if (isinstance(heads, int) and not isinstance(heads, bool) and heads > 0
            and isinstance(hidden, int) and not isinstance(hidden, bool) and hidden > 0):
        return hidden // heads
    return None


def flat_target(target: Config) -> Config:
    """A target config with its `text_config` settings (Qwen3.5-style) lifted to the top level."""
    text = target.get("text_config")
    return {**target, **text} if isinstance(text, dict) else target


def _conflicts(config: Config, dflash: Config) -> list[str]:
    return [
        f"{key} is {config[key]!r} at the top level but {value!r} in dflash_config: engines "
        "read different ones (SGLang: dflash_config wins, which is what is checked here)"
        for key, value in dflash.items()
        if key in config and config[key] != value
    ]


def _with_resolved_mask(
    config: Config, folders: list[Path], findings: list[Finding],
    finding: Callable[..., Finding],
) -> tuple[Config, bool]:
    """A mask given only as token text (`mask_token`) is resolved through the tokenizer files
    (given with an id too, the two must agree); the flag says an unresolvable one was already
    reported."""
    given = dflash_field(config, "mask_token_id")
    text = dflash_field(config, "mask_token")
    if not isinstance(text, str):
        return config, False
    token_id = resolve_token(text, folders)
    if given is not None:
        if token_id is not None and token_id != given:
            findings.append(finding(
                rules.DRAFTER_MASK, Severity.high,
                f"mask_token_id {given!r} disagrees with mask_token {text!r}, which the "
                f"tokenizer gives id {token_id}: engines read the id, tools the text",
            ))
        return config, False
    if token_id is None:
        findings.append(finding(
            rules.DRAFTER_MASK, Severity.medium,
            f"mask_token {text!r} is given only as text and no tokenizer file here defines it",
        ))
        return config, True
    nested = config.get("dflash_config")
    dflash: Config = nested if isinstance(nested, dict) else {}
    return {**config, "dflash_config": {**dflash, "mask_token_id": token_id}}, False


def _layer_problems(config: Config, target: Config) -> list[tuple[Rule, Severity, str]]:
    problems: list[tuple[Rule, Severity, str]] = []
    layer_ids = dflash_field(config, "target_layer_ids")
    if not isinstance(layer_ids, list):
        return problems
    ids = [i for i in layer_ids if isinstance(i, int) and not isinstance(i, bool)]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        problems.append((rules.DRAFTER_LAYERS, Severity.high,
                         f"target_layer_ids repeats {duplicates}: the fc input width and the "
                         "engines' feature capture disagree"))
    if not duplicates and ids != sorted(ids):
        problems.append((rules.DRAFTER_LAYERS, Severity.high,
                         f"target_layer_ids {ids} are not in increasing order: vLLM captures "
                         "the target's layers sorted (and its DSpark loader refuses the list) "
                         "while the reference concatenates them as listed, so fc reads "
                         "permuted features"))
    layers = target.get("num_hidden_layers")
    if isinstance(layers, int) and layers - 1 in ids:
        problems.append((rules.DRAFTER_LAYERS, Severity.medium,
                         f"target_layer_ids includes the target's last layer {layers - 1}: "
                         "llama.cpp aborts on it and engines disagree on its features "
                         "(pre- or post-norm)"))
    return problems


def _dflash2_problems(
    config: Config, dflash: Config, block: object
) -> list[tuple[Severity, str]]:
    """A DFlash 2 drafter's own constraints (nested `dflash_config` values win)."""
    sizes = {
        name: dflash.get(name, config.get(name))
        for name in ("conv_group_size", "conv_kernel_size", "selector_rank", "selector_top_k")
    }
    positive = {
        name: value for name, value in sizes.items()
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1
    }
    bad = [name for name in sizes if name not in positive]
    problems = [
        (Severity.high, f"DFlash 2 field {name} is {sizes[name]!r}, not a positive integer")
        for name in bad
    ]
    if bad:
        return problems
    hidden, vocab = config.get("hidden_size"), config.get("vocab_size")
    group, kernel, top_k = (
        positive["conv_group_size"], positive["conv_kernel_size"], positive["selector_top_k"]
    )
    if isinstance(hidden, int) and hidden % group:
        problems.append((Severity.high, f"hidden_size {hidden} is not a multiple of "
                         f"conv_group_size {group}: the convolution groups do not tile it"))
    if isinstance(vocab, int) and top_k > vocab:
        problems.append((Severity.high, f"selector_top_k {top_k} exceeds vocab_size {vocab}"))
    if isinstance(hidden, int) and hidden < top_k * (top_k + 1):
        problems.append((Severity.high, f"hidden_size {hidden} < selector_top_k * "
                         f"(selector_top_k + 1) = {top_k * (top_k + 1)}: llama.cpp cannot pack "
                         "the selector's scores"))
    if isinstance(block, int) and kernel > block:
        problems.append((Severity.medium, f"conv_kernel_size {kernel} exceeds block_size "
                         f"{block}: the extra taps only read zeros"))
    return problems


# The token table: every id the target gives meaning to, for the mask check.

_SPECIAL_KEYS = ("pad_token", "eos_token", "bos_token", "unk_token", "sep_token", "cls_token")
_ID_KEYS = ("pad_token_id", "eos_token_id", "bos_token_id", "stop_token_ids")
# Control tokens of every spelling templates write: `<|im_start|>`, DeepSeek's full-width
# `<｜User｜>`, `<think>` and its closing `</think>`, `[INST]`/`[/INST]`, GLM's `[gMASK]`.
_CONTROL_TOKEN = re.compile(
    r"<[|｜][^|｜<>\s]{1,40}[|｜]>|</?[a-z_]{2,30}>|\[/?[A-Za-z_]{3,30}\]")
_MASK_TOKEN = re.compile(r"(?:<\|?|\[)\s*(?:[a-z0-9]+_)?mask(?:_token)?\s*(?:\|?>|\])",
                         re.IGNORECASE)
# Llama 3's 250 `<|reserved_special_token_N|>` are marked special yet mean nothing: free for a
# mask unless a config or template names one.
_FREE_RESERVED = re.compile(r"<\|reserved_special_token_\d+\|>")


def _is_mask(content: str | None) -> bool:
    """A token whose whole text is a mask token's (`<|mask|>`, `<mask>`, `[MASK]`,
    `<|dflash_mask|>`, `<|mask_token|>`) is the one meant for the drafter's mask; one whose text
    merely contains "mask" (GLM's `[gMASK]`/`[sMASK]`, which its template writes) is not."""
    return content is not None and _MASK_TOKEN.fullmatch(content) is not None


def resolve_token(text: str, folders: list[Path]) -> int | None:
    """The id of the token `text` in the first folder whose tokenizer files define it."""
    for folder in folders:
        token_id = token_table(folder)[0].get(text)
        if token_id is not None:
            return token_id
    return None


def reserved_token_ids(target_dir: Path) -> dict[int, str]:
    """Token ids a mask token must not reuse, each named by where it was found."""
    reserved: dict[int, str] = {}
    for filename in ("config.json", "generation_config.json"):
        config = read_json(target_dir / filename)
        for source in (config, config.get("text_config")):
            if not isinstance(source, dict):
                continue
            for key in _ID_KEYS:
                for token in int_ids(source.get(key)):
                    reserved.setdefault(token, f"{filename} {key}")
    by_content, special = token_table(target_dir)
    tokenizer = read_json(target_dir / "tokenizer_config.json")
    for filename, config in (
        ("tokenizer_config.json", tokenizer),
        ("special_tokens_map.json", read_json(target_dir / "special_tokens_map.json")),
    ):
        named = [(key, token_text(config.get(key))) for key in _SPECIAL_KEYS]
        extra = config.get("additional_special_tokens")
        named += [("additional_special_tokens", token_text(v)) for v in extra or []
                  if isinstance(extra, list) and not _is_mask(token_text(v))]
        for key, content in named:
            if content in by_content:
                reserved.setdefault(by_content[content], f"{filename} {key} {content!r}")
    for text in _template_sources(target_dir, tokenizer):
        for control in set(_CONTROL_TOKEN.findall(text)):
            if control in by_content and not _is_mask(control):
                reserved.setdefault(by_content[control], f"chat template control token {control!r}")
    for content, token_id in by_content.items():
        if token_id in special and not _is_mask(content) and not _FREE_RESERVED.fullmatch(content):
            reserved.setdefault(token_id, f"special token {content!r}")
    return reserved


def _template_sources(folder: Path, tokenizer: dict[str, Any]) -> list[str]:
    from dflash_guard.templates.locate import read_jinja, template_files, templates_in_config

    sources = [text for _, text in templates_in_config(tokenizer)]
    sources += [text for _, text in templates_in_config(read_json(folder / "chat_template.json"))]
    for jinja in template_files(folder).values():  # additional_chat_templates/ included
        # an unreadable template is reported by the template detector
        with contextlib.suppress(OSError, ValueError):
            sources.append(read_jinja(jinja))
    return sources
