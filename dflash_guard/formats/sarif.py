"""SARIF 2.1.0 rendering of a scan (as GitHub code scanning accepts it)."""

from __future__ import annotations

from collections.abc import Iterable

from dflash_guard import __version__
from dflash_guard.scan.interface import Finding, Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

# Every rule id a detector can emit, with a one-line description (the README lists them too).
RULES: dict[str, str] = {
    "DG-UNSCANNABLE": "A file or archive member that cannot be scanned (never a silent pass).",
    "DG-EXECUTABLE": "A native executable, shared library or bytecode file in a model folder.",
    "DG-NOT-PICKLE": "A file with a pickle-family name whose content is not a pickle.",
    "DG-PICKLE-PRESENT": "The file holds pickle streams (only allowlisted globals).",
    "DG-PICKLE-DANGEROUS-GLOBAL": "A pickle imports a known-dangerous global.",
    "DG-PICKLE-GLOBAL": "A pickle imports a global that is not on the state-dict allowlist.",
    "DG-PICKLE-UNRESOLVED-GLOBAL": "A pickle imports a global whose name is computed.",
    "DG-PICKLE-BUILD-ON-GLOBAL": "A pickle's BUILD rewrites attributes of an imported global.",
    "DG-PICKLE-INVALID": "A truncated or malformed pickle stream.",
    "DG-PICKLE-TRAILING": "Bytes after the last pickle look like a broken pickle.",
    "DG-ZIP-CRC": "A zip member fails its CRC check.",
    "DG-MODELSCAN": "modelscan's denylist flagged an unsafe operator.",
    "DG-MODELSCAN-ERROR": "modelscan could not scan the file (our own pass still did).",
    "DG-ST-TRUNCATED": "A safetensors file is shorter than its header says.",
    "DG-ST-LENGTH": "A safetensors header length is larger than the file or the limit.",
    "DG-ST-HEADER": "A safetensors header is not a valid JSON object.",
    "DG-ST-DUPLICATE-KEY": "A safetensors header repeats a JSON key.",
    "DG-ST-TENSOR": "A safetensors tensor entry has a bad dtype, shape or byte span.",
    "DG-ST-TRAILING": "Bytes after the last tensor of a safetensors file.",
    "DG-ST-POLYGLOT": "A zip, pickle, numpy or GGUF signature inside a safetensors file.",
    "DG-ST-INVALID": "The safetensors loader rejects the file.",
    "DG-ST-INDEX": "A sharded index that is not valid JSON or has no weight_map.",
    "DG-ST-INDEX-PATH": "A shard path that points outside the checkpoint folder.",
    "DG-ST-INDEX-MISSING": "A shard named in the index is missing.",
    "DG-ST-INDEX-TENSOR": "A tensor missing from its shard, in two shards, or not indexed.",
    "DG-GGUF-MALFORMED": "The gguf reader rejects the file.",
    "DG-GGUF-TENSORS": "A GGUF tensor table with duplicate names or data past the file.",
    "DG-GGUF-METADATA": "GGUF metadata missing or of the wrong type.",
    "DG-TPL-SYNTAX": "A chat template that does not parse.",
    "DG-TPL-DUNDER": "A chat template reaches dunder or internal attributes (SSTI).",
    "DG-TPL-COMPUTED-ATTR": "A chat template subscripts with a name built at render time.",
    "DG-TPL-ATTR-FILTER": "A chat template uses the |attr filter.",
    "DG-TPL-ESCAPED-NAME": "A chat template hides underscores with escapes.",
    "DG-TPL-RISKY-GLOBAL": "A chat template uses a global that leads to __globals__.",
    "DG-TPL-INCLUDE": "A chat template loads another template.",
    "DG-CONFIG-INVALID": "A config file that cannot be read.",
    "DG-RC-PROCESS": "Remote code runs processes.",
    "DG-RC-NETWORK": "Remote code uses the network.",
    "DG-RC-DYNAMIC-CODE": "Remote code evaluates, compiles or imports code dynamically.",
    "DG-RC-ENCODED-BLOB": "Remote code decodes or carries an encoded payload.",
    "DG-RC-CREDENTIALS": "Remote code reads the environment or credential files.",
    "DG-RC-FS-WRITE": "Remote code writes, moves or deletes files.",
    "DG-RC-IMPORT-TIME-SIDE-EFFECT": "Remote code does something when imported.",
    "DG-RC-UNPARSEABLE": "A Python file that does not parse.",
    "DG-RC-UNREVIEWED": "Remote code whose sha256 is not in the reviewed set.",
    "DG-RC-MISSING": "An auto_map target whose file is not in the folder.",
    "DG-RC-REMOTE-REPO": "An auto_map target in another repository's code.",
    "DG-DRAFTER-ARCH": "A drafter architecture dflash-guard does not know.",
    "DG-DRAFTER-MASK": "mask_token_id missing, outside the vocabulary or aliasing a special id.",
    "DG-DRAFTER-LAYERS": "target_layer_ids or num_target_layers disagree with the target.",
    "DG-DRAFTER-SHAPE": "hidden_size, vocab_size or head_dim incompatible with the target.",
    "DG-DRAFTER-BLOCK": "block_size outside 2..64.",
    "DG-DRAFTER-PARAMS": "The drafter's parameter count exceeds the budget.",
}
_LEVEL = {
    Severity.critical: "error",
    Severity.high: "error",
    Severity.medium: "warning",
    Severity.low: "note",
}
_SECURITY_SEVERITY = {
    Severity.critical: "9.5",
    Severity.high: "8.0",
    Severity.medium: "5.0",
    Severity.low: "2.0",
}


def render_sarif(findings: Iterable[Finding]) -> dict[str, object]:
    """A SARIF 2.1.0 log with one run, its rules and one result per finding."""
    findings = list(findings)
    worst: dict[str, Severity] = {}
    for finding in findings:
        worst[finding.rule_id] = max(worst.get(finding.rule_id, finding.severity), finding.severity)
    rule_ids = sorted(worst)
    rules = [
        {
            "id": rule_id,
            "name": rule_id.replace("-", ""),
            "shortDescription": {"text": RULES.get(rule_id, rule_id)},
            "defaultConfiguration": {"level": _LEVEL[worst[rule_id]]},
            "properties": {
                "security-severity": _SECURITY_SEVERITY[worst[rule_id]],
                "tags": ["security"],
            },
        }
        for rule_id in rule_ids
    ]
    results = []
    for finding in findings:
        location: dict[str, object] = {"artifactLocation": {"uri": finding.file}}
        if finding.line:
            location["region"] = {"startLine": finding.line}
        message = (
            finding.message
            if not finding.member
            else (f"{finding.message} [member {finding.member}]")
        )
        results.append(
            {
                "ruleId": finding.rule_id,
                "ruleIndex": rule_ids.index(finding.rule_id),
                "level": _LEVEL[finding.severity],
                "message": {"text": message},
                "locations": [{"physicalLocation": location}],
                "properties": {"severity": finding.severity.name, "detector": finding.detector},
            }
        )
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "dflash-guard", "version": __version__, "rules": rules}
                },
                "results": results,
            }
        ],
    }
