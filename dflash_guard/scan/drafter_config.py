"""A DFlash drafter's `config.json` against its target's (`--target`).

Rules: DG-DRAFTER-ARCH (unknown architecture/model_type, medium), DG-DRAFTER-MASK (mask_token_id
missing, outside the vocabulary, or equal to a pad/eos/bos/stop id of the target: high),
DG-DRAFTER-LAYERS (target_layer_ids out of range or num_target_layers disagreeing, high),
DG-DRAFTER-SHAPE (hidden_size/vocab_size/head_dim incompatible, high), DG-DRAFTER-BLOCK
(block_size outside 2..64, medium), DG-DRAFTER-PARAMS (parameter budget exceeded, medium),
DG-CONFIG-INVALID (a config that cannot be read, medium).
"""

from __future__ import annotations

from pathlib import Path

from dflash_guard.scan import jsonfile, rules
from dflash_guard.scan.interface import Finding, Rule, Severity
from kernels_ref.compat import compatibility_problems, dflash_field

DETECTOR = "drafter-config"
KNOWN_ARCHITECTURES = frozenset({"DFlashDraftModel", "DFlash2DraftModel"})
KNOWN_MODEL_TYPES = frozenset({"dflash", "dflash2", "qwen3", "llama"})
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


def _load(path: Path) -> tuple[dict | None, str | None]:
    if not path.is_file():
        return None, None
    try:
        value = jsonfile.read(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return None, f"{path.name} is not readable JSON: {error}"
    return (value if isinstance(value, dict) else None), None


def _ids(value: object) -> set[int]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()


def reserved_token_ids(target_dir: Path) -> dict[int, str]:
    """Token ids a mask token must not reuse: pad, eos, bos and stop ids, named by source."""
    reserved: dict[int, str] = {}
    for filename in ("config.json", "generation_config.json"):
        config, _ = _load(target_dir / filename)
        for key in ("pad_token_id", "eos_token_id", "bos_token_id", "stop_token_ids"):
            for token in _ids((config or {}).get(key)):
                reserved.setdefault(token, f"{filename} {key}")
    tokenizer, _ = _load(target_dir / "tokenizer_config.json")
    tokenizer = tokenizer or {}
    by_content = {}
    decoder = tokenizer.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for token_id, entry in decoder.items():
            content = entry.get("content") if isinstance(entry, dict) else None
            if isinstance(content, str) and str(token_id).isdigit():
                by_content[content] = int(token_id)
    for key in ("pad_token", "eos_token", "bos_token"):
        value = tokenizer.get(key)
        content = value.get("content") if isinstance(value, dict) else value
        if isinstance(content, str) and content in by_content:
            reserved.setdefault(by_content[content], f"tokenizer_config.json {key} {content!r}")
    return reserved


def check_drafter(
    drafter_dir: Path,
    display: str,
    *,
    target: Path | None,
    param_count: int | None,
    param_budget: int | None,
) -> list[Finding]:
    """Findings for the drafter config in `drafter_dir` (reported under `display`)."""

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
    dflash = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    block = config.get("block_size", dflash.get("block_size"))
    if not isinstance(block, int) or not BLOCK_RANGE[0] <= block <= BLOCK_RANGE[1]:
        findings.append(
            finding(
                rules.DRAFTER_BLOCK,
                Severity.medium,
                f"block_size {block!r} is outside {BLOCK_RANGE[0]}..{BLOCK_RANGE[1]}",
            )
        )
    budget = DEFAULT_PARAM_BUDGET if param_budget is None else param_budget
    if param_count is not None and param_count > budget:
        findings.append(
            finding(
                rules.DRAFTER_PARAMS,
                Severity.medium,
                f"{param_count:,} parameters exceed the budget of {budget:,}",
            )
        )
    target_config: dict = {}
    if target is not None:
        target_config, error = _load(target / "config.json")
        if error or target_config is None:
            findings.append(
                finding(
                    rules.CONFIG_INVALID, Severity.medium, f"target: {error or 'no config.json'}"
                )
            )
            target_config = {}
    findings.extend(  # with no target, only the mask token is checked (against its own vocab)
        finding(COMPAT_RULES[problem.code], Severity.high, problem.message)
        for problem in compatibility_problems(config, target_config)
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
    findings.extend(
        finding(rule, severity, message)
        for rule, severity, message in _shape_problems(config, target_config)
    )
    return findings


def _shape_problems(config: dict, target: dict) -> list[tuple[Rule, Severity, str]]:
    problems: list[tuple[Rule, Severity, str]] = []
    head_dim = config.get("head_dim")
    heads = config.get("num_attention_heads")
    hidden = config.get("hidden_size")
    if (
        all(isinstance(v, int) and v > 0 for v in (heads, hidden))
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
    if (
        head_dim is not None
        and target.get("head_dim") is not None
        and (head_dim != target.get("head_dim"))
    ):
        problems.append(
            (
                rules.DRAFTER_SHAPE,
                Severity.medium,
                f"head_dim {head_dim!r} != the target's {target.get('head_dim')!r}",
            )
        )
    return problems
