"""What a model's `generation_config.json` makes the engine do to every answer
(`rules.GENERATION_DEFAULTS`).

The pinned vLLM (0.32: `vllm/config/model.py`, `ModelConfig.get_diff_sampling_param`) reads the
folder's `generation_config.json` through transformers' `GenerationConfig.from_pretrained`
(`vllm/transformers_utils/config.py`, `try_get_generation_config`) and applies each field of
`APPLIED` that the file sets as the default of every request that does not set it itself
(`max_new_tokens` becomes `max_tokens`). Its other fields are not sampling defaults (the
end-of-generation ids are judged by `tokens.meaning_findings`). Without a generation_config.json,
transformers (5.19) builds one from `config.json`, which keeps a top-level `max_new_tokens`.

- HIGH: a penalty that is not neutral (it changes even a greedy answer), a `max_new_tokens`
  (it caps every answer a client does not cap), a value of the wrong type or not finite, a file
  that is not a JSON object.
- MEDIUM: a sampling default (`SAMPLING`) set to other than vLLM's own, in a file no published
  model of the catalog (`generation_known.json`) ships.
A file whose parsed content is a published one's (the catalog is keyed by the sha256 of the
canonical JSON: the engine reads values, not bytes) or whose sha256 is reviewed (the policy's
`reviewed_files`) is quiet. A file that is not JSON at all is the scan's DG-FORMAT-UNKNOWN.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from functools import cache
from pathlib import Path

from dflash_guard import fileio, rules
from dflash_guard.findings import Finding
from dflash_guard.severity import Severity

DETECTOR = "generation"
NAME = "generation_config.json"
# vLLM 0.32 ModelConfig.get_diff_sampling_param `available_params`, in its order
APPLIED = ("repetition_penalty", "presence_penalty", "frequency_penalty", "temperature", "top_k",
           "top_p", "min_p", "max_new_tokens")
PENALTIES = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
# vLLM's own defaults (SamplingParams): a file that sets these changes nothing
SAMPLING = {"temperature": (1.0,), "top_k": (0, -1), "top_p": (1.0,), "min_p": (0.0,)}
INTEGERS = frozenset({"top_k", "max_new_tokens"})
KNOWN = Path(__file__).with_name("generation_known.json")
REVIEWED = "an entry of the policy's reviewed_files clears it: `dflash-guard review` writes one"


@cache
def known_files() -> dict[str, dict[str, str]]:
    """The catalog: canonical digest -> {name, source} of each published generation config."""
    catalog: dict[str, dict[str, str]] = json.loads(KNOWN.read_text(encoding="utf-8"))
    return catalog


def canonical_sha256(document: object) -> str:
    """sha256 of the canonical JSON of a parsed document (sorted keys, no whitespace)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _bad_type(name: str, value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True
    if isinstance(value, int):  # exact, however large (math.isfinite overflows on a huge one)
        return False
    return name in INTEGERS or not math.isfinite(value)


def judge(document: object, display: str) -> list[Finding]:
    """The findings on a parsed generation config shown as `display` (catalog and review aside)."""
    if not isinstance(document, dict):
        return [Finding.of(rules.GENERATION_DEFAULTS, display,
                           f"not a JSON object ({type(document).__name__}): transformers "
                           "cannot read it as a generation config", detector=DETECTOR)]
    findings = []
    set_ = {name: document[name] for name in APPLIED if document.get(name) is not None}
    wrong = {name: value for name, value in set_.items() if _bad_type(name, value)}
    if wrong:
        findings.append(Finding.of(
            rules.GENERATION_DEFAULTS, display,
            f"{_shown(wrong)}: not a finite number of the right type, yet vLLM applies it as a "
            "default of every request", detector=DETECTOR))
    penalties = {name: value for name, value in set_.items()
                 if name in PENALTIES and name not in wrong and value != PENALTIES[name]}
    if penalties:
        findings.append(Finding.of(
            rules.GENERATION_DEFAULTS, display,
            f"{_shown(penalties)}: vLLM applies it to every request that does not set it, which "
            "changes even greedy (temperature 0) answers", detector=DETECTOR))
    if "max_new_tokens" in set_ and "max_new_tokens" not in wrong:
        findings.append(Finding.of(
            rules.GENERATION_DEFAULTS, display,
            f"{_shown({'max_new_tokens': set_['max_new_tokens']})}: vLLM makes it the max_tokens "
            "of every request that does not set one, which cuts every such answer there",
            detector=DETECTOR))
    sampling = {name: value for name, value in set_.items() if name not in wrong
                and name in SAMPLING and value not in SAMPLING[name]}
    if sampling:
        findings.append(Finding.of(
            rules.GENERATION_DEFAULTS, display,
            f"{_shown(sampling)}: sampling defaults vLLM applies to every request that does not "
            "set them, in a file no published model of the catalog ships",
            detector=DETECTOR, severity=Severity.medium))
    return findings


def _shown(fields: dict[str, object]) -> str:
    return ", ".join(f"{name} {json.dumps(value)[:40]}" for name, value in fields.items())


def file_findings(path: Path, display: str, reviewed: frozenset[str]) -> list[Finding]:
    """`rules.GENERATION_DEFAULTS` for the generation config at `path`: none when it is a
    published file of the catalog or its sha256 is in `reviewed`, or when it cannot be read as
    JSON (the scan reports that file itself)."""
    try:
        data = fileio.read_regular(path, fileio.MAX_JSON_BYTES)
        document = fileio.loads_json(data)
    except (OSError, ValueError):
        return []
    digest = hashlib.sha256(data).hexdigest()
    try:
        published = canonical_sha256(document) in known_files()
    except UnicodeEncodeError:  # a lone surrogate escape: JSON Python reads, no published file
        published = False
    if digest in reviewed or published:
        return []
    return [dataclasses.replace(f, message=f"{f.message} (sha256 {digest}: once read, "
                                           f"{REVIEWED})")
            for f in judge(document, display)]


def folder_findings(folder: Path, prefix: str, reviewed: frozenset[str]) -> list[Finding]:
    """`rules.GENERATION_DEFAULTS` for the model in `folder` (its top-level files, where the
    engine reads them); `prefix` is how the scan shows the folder's files (`target/`)."""
    path = folder / NAME
    if path.is_file():
        return file_findings(path, prefix + NAME, reviewed)
    config = folder / "config.json"
    try:
        data = fileio.read_regular(config, fileio.MAX_JSON_BYTES) if config.is_file() else b"{}"
        document = fileio.loads_json(data)
    except (OSError, ValueError):
        return []  # the scan reports it
    digest = hashlib.sha256(data).hexdigest()
    if (not isinstance(document, dict) or document.get("max_new_tokens") is None
            or digest in reviewed):
        return []
    return [dataclasses.replace(f, message=f"no {NAME}, so transformers builds the defaults "
                                           f"from config.json: {f.message} (sha256 {digest}: "
                                           f"once read, {REVIEWED})")
            for f in judge({"max_new_tokens": document["max_new_tokens"]},
                           prefix + "config.json")]
