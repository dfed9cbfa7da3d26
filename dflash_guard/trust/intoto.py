"""The in-toto Statement v1, defined once: what approval records are and model.sig payloads carry.

`Statement(subjects, predicate_type, predicate)` is built by `provenance` (the approval record)
and read back by `provenance` and `signing` (the DSSE payload of an OpenSSF model signature).
`from_json` checks the envelope (`_type`, `predicateType`, subjects with digests, a predicate
object) and raises `ValueError("FIELD: why")`; callers add the file name. (The
`in_toto_attestation` package models statements as protobuf, whose Struct turns every integer of
a predicate into a float: records would no longer round-trip byte for byte.)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

STATEMENT_V1 = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"  # the DSSE payload type of a statement


@dataclasses.dataclass(frozen=True)
class Subject:
    """A statement's subject: a name and its digests (`{"sha256": HEX}`)."""

    name: str
    digest: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Statement:
    """An in-toto Statement v1 about `subjects`, with a typed predicate."""

    subjects: tuple[Subject, ...]
    predicate_type: str
    predicate: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "_type": STATEMENT_V1,
            "subject": [{"name": s.name, "digest": dict(s.digest)} for s in self.subjects],
            "predicateType": self.predicate_type,
            "predicate": dict(self.predicate),
        }

    def dumps(self) -> bytes:
        """Stable JSON bytes (what is written, and what a signature covers)."""
        return dumps_json(self.to_json())

    @classmethod
    def from_json(cls, data: Any, predicate_type: str, what: str) -> Statement:
        """A statement whose predicate is `predicate_type` (`what` names it in errors)."""
        if not isinstance(data, dict) or data.get("_type") != STATEMENT_V1:
            got = data.get("_type") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"_type: not an in-toto Statement v1 ({got!r})")
        if data.get("predicateType") != predicate_type:
            raise ValueError(f"predicateType: {data.get('predicateType')!r} is not {what}")
        subjects = data.get("subject")
        if not isinstance(subjects, list):
            raise ValueError("subject: expected a list")
        parsed = []
        for i, subject in enumerate(subjects):
            if not (isinstance(subject, dict) and isinstance(subject.get("name"), str)
                    and isinstance(subject.get("digest"), dict)):
                raise ValueError(f"subject[{i}]: expected a name and a digest")
            parsed.append(Subject(subject["name"], dict(subject["digest"])))
        predicate = data.get("predicate")
        if not isinstance(predicate, dict):
            raise ValueError("predicate: expected an object")
        return cls(tuple(parsed), predicate_type, predicate)

    @classmethod
    def loads(cls, payload: bytes | str, predicate_type: str, what: str) -> Statement:
        """Parse statement JSON; bad JSON or a bad envelope is a `ValueError`."""
        try:
            data = json.loads(payload)
        except ValueError as error:
            raise ValueError(f"not JSON: {error}") from None
        return cls.from_json(data, predicate_type, what)


def dumps_json(document: Mapping[str, Any]) -> bytes:
    """A statement's JSON as written: sorted keys, two-space indent, a final newline."""
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
