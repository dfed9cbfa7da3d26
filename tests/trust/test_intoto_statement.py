"""The one in-toto Statement type: approval records and model-signature payloads share it."""

from __future__ import annotations

import json

import pytest

from dflash_guard.trust.intoto import STATEMENT_V1, Statement, Subject

PREDICATE = "https://example.com/predicate/v1"


def _statement() -> Statement:
    return Statement((Subject("a.bin", {"sha256": "ab" * 32}),), PREDICATE, {"n": 3})


def test_statement_round_trips_through_its_json() -> None:
    statement = _statement()
    assert json.loads(statement.dumps())["_type"] == STATEMENT_V1
    assert Statement.loads(statement.dumps(), PREDICATE, "an example") == statement
    assert json.loads(statement.dumps())["predicate"] == {"n": 3}  # integers stay integers


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"_type": "https://in-toto.io/Statement/v0.1"}, "_type: not an in-toto Statement v1"),
        ({"predicateType": "https://slsa.dev/provenance/v1"}, "is not an example"),
        ({"subject": {"name": "a"}}, "subject: expected a list"),
        ({"subject": [{"name": "a"}]}, "subject[0]: expected a name and a digest"),
        ({"predicate": []}, "predicate: expected an object"),
    ],
)
def test_statement_refuses_a_bad_envelope(change, message) -> None:
    data = {**_statement().to_json(), **change}
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Statement.from_json(data, PREDICATE, "an example")
    with pytest.raises(ValueError, match="not JSON"):
        Statement.loads(b"{", PREDICATE, "an example")
