"""The shape an approval record must have before any field of it is used.

`verify-approval` and `monitor --record` read records handed over from outside, unsigned ones
included (the signature is checked after the record is parsed). Every field they read is held
to a JSON Schema (draft 2020-12, `jsonschema`) with sane ranges: digests are hex of the right
length, names and reasons are bounded strings, the acceptance length a monitor takes as its
baseline is a number in [1, 1000], counts are bounded integers. Anything else is one
`malformed approval record` line naming the field, never a traceback. Unknown fields are
allowed (records of other versions carry more), but never read.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

HEX64 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
NAME = {"type": "string", "minLength": 1, "maxLength": 4096}
TEXT = {"type": "string", "maxLength": 65536}
TAU = {"type": "number", "minimum": 1, "maximum": 1000}  # a mean acceptance length
COUNT = {"type": "integer", "minimum": 0, "maximum": 10**9}
MAX_SUBJECTS = 2_000_000  # one per locked file: far above the largest lock

_DIGEST = {"type": "object", "required": ["sha256"], "properties": {"sha256": HEX64}}
_CLOSURE = {
    "type": "object", "required": ["text_sha256", "extends", "files"],
    "additionalProperties": False,
    "properties": {
        "text_sha256": HEX64,
        "extends": {"oneOf": [
            {"type": "null"},
            {"type": "object", "required": ["name", "sha256"], "additionalProperties": False,
             "properties": {"name": NAME, "sha256": HEX64}}]},
        "files": {"type": "array", "maxItems": 100_000, "items": {
            "type": "object", "required": ["field", "path", "sha256"],
            "additionalProperties": False,
            "properties": {"field": NAME, "path": NAME, "sha256": HEX64}}},
    },
}
_CHECK = {
    "type": "object", "required": ["name"],
    "properties": {
        "name": NAME,
        "verdict": {"type": "string", "maxLength": 64},
        "passed": {"type": "boolean"},
        "reason": {"type": ["string", "null"], "maxLength": 65536},
        "evidence": {"type": ["object", "null"]},
    },
    "if": {"properties": {"name": {"const": "difftest"}}},
    "then": {"properties": {"evidence": {"oneOf": [
        {"type": "null"},
        {"type": "object", "properties": {"acceptance_length": TAU}}]}}},
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["_type", "subject", "predicateType", "predicate"],
    "properties": {
        "_type": {"type": "string", "maxLength": 200},
        "predicateType": {"type": "string", "maxLength": 200},
        "subject": {"type": "array", "minItems": 1, "maxItems": MAX_SUBJECTS, "items": {
            "type": "object", "required": ["name", "digest"],
            "properties": {"name": NAME, "digest": _DIGEST}}},
        "predicate": {
            "type": "object", "required": ["policy"],
            "properties": {
                "passed": {"type": "boolean"},
                "approved_at": {"type": "string",
                                "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"},
                "tool": {"type": "object",
                         "properties": {"name": NAME, "version": {"type": "string",
                                                                  "maxLength": 200}}},
                "policy": {"type": "object", "required": ["digest"],
                           "properties": {"name": {"type": "string", "maxLength": 4096},
                                          "uri": {"type": "string", "maxLength": 4096},
                                          "digest": _DIGEST, "closure": _CLOSURE}},
                "lockfile": {"type": "object", "required": ["name", "content_digest"],
                             "properties": {"name": NAME, "content_digest": {
                                 "type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}}},
                "artifacts": {"type": "array", "maxItems": 64, "items": {
                    "type": "object", "properties": {"files": COUNT}}},
                "engines": {"type": "array", "maxItems": 64, "items": {"type": "object"}},
                "checks": {"type": "array", "maxItems": 64, "items": _CHECK},
                "waivers": {"type": "array", "maxItems": 10_000, "items": TEXT},
            },
        },
    },
}


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(SCHEMA)
    return Draft202012Validator(SCHEMA)


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "top level"


def record_problem(document: Any) -> str | None:
    """Why `document` is not a well-formed approval record (`FIELD: MESSAGE`), or None."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(document))
    if error is None:
        return None
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return f"{_path(error.absolute_path)}: {message}"
