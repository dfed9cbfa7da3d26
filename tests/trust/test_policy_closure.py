"""Issue 45 item 1: a policy is its closure (`trust.closure`), and a record binds it.

Every kind of file a policy names is in the closure by content (feeds, folder feeds member by
member, keys of every signer kind, comparison records, prompt sets), a built-in it extends by its
sha256, and `policy_binding` says which file differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.gate.record import policy_descriptor
from dflash_guard.trust.closure import canonical_digest, policy_closure
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.provenance import policy_binding
from tests.support.trust import make_key_pair, write_policy

ADVISORIES = ("advisories:\n  feeds: [feeds/]\n  signers: {identities: [], public_keys: "
              "[feedkey.pub]}\n  allow_unsigned: true\n  fail_on: high\n  max_age_days: 30\n")


def _policy(folder: Path) -> Path:
    """A policy naming a feed folder, a feed key, lockfile/model/approval keys, prompts."""
    folder.mkdir(parents=True)
    (folder / "feeds").mkdir()
    (folder / "feeds" / "a.json").write_text("[]")
    for name in ("feedkey", "lockkey", "modelkey", "approver"):
        make_key_pair(folder, name)
    keys = {kind: f"  {kind}: {{identities: [], public_keys: [{name}.pub]}}"
            for kind, name in (("lockfile", "lockkey"), ("models", "modelkey"),
                               ("approvals", "approver"))}
    (folder / "cmp.json").write_text("{}")
    path = write_policy(folder, *((f"  {kind}: {{identities: [], public_keys: []}}", line)
                                  for kind, line in keys.items()),
                        ("gguf_comparisons: []\n", "gguf_comparisons:\n  - record: cmp.json\n"))
    path.write_text(path.read_text() + ADVISORIES)
    return path


def _statement(policy_path: Path) -> dict:
    policy = load_policy(policy_path)
    return {"predicate": {"policy": policy_descriptor(policy, policy_closure(policy))}}


def test_the_closure_lists_every_file_by_content(tmp_path):
    path = _policy(tmp_path / "prod")
    closure = policy_closure(load_policy(path))
    named = {(f.field, f.path) for f in closure.files}
    assert named == {("advisories.feeds", "feeds/a.json"),
                     ("advisories public key", "feedkey.pub"),
                     ("lockfile public key", "lockkey.pub"),
                     ("models public key", "modelkey.pub"),
                     ("approvals public key", "approver.pub"),
                     ("difftest.prompts", "prompts.jsonl"),
                     ("gguf_comparisons.record", "cmp.json")}
    assert closure.text_sha256 == load_policy(path).digest.removeprefix("sha256:")
    assert closure.digest.removeprefix("sha256:") == canonical_digest(closure.to_json())


def test_an_extended_builtin_is_named_by_its_sha256(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("extends: dev\nname: mine\n")
    closure = policy_closure(load_policy(path))
    assert closure.extends is not None and closure.extends[0] == "dev"
    assert len(closure.extends[1]) == 64
    listing = closure.to_json()
    listing["extends"]["sha256"] = "0" * 64  # another tool version's `dev`
    assert "extends dev (sha256 000000000000...) in the record" in closure.differences(
        listing)[0]


@pytest.mark.parametrize("change", ["feed edited", "feed added", "signature added",
                                    "feed key", "lockfile key", "model key", "prompts",
                                    "comparison record"])
def test_any_named_file_changed_is_another_policy(tmp_path, change):
    """The same text with one named file changed: the record is refused and the file named."""
    prod = _policy(tmp_path / "prod")
    statement = _statement(prod)
    assert policy_binding(statement, load_policy(prod)) is None
    folder = prod.parent
    edit = {
        "feed edited": lambda: (folder / "feeds" / "a.json").write_text("[ ]"),
        "feed added": lambda: (folder / "feeds" / "sub").mkdir() or (
            folder / "feeds" / "sub" / "b.json").write_text("[]"),
        "signature added": lambda: (folder / "feeds" / "a.json.sig").write_bytes(b"x"),
        "feed key": lambda: make_key_pair(folder, "feedkey"),
        "lockfile key": lambda: make_key_pair(folder, "lockkey"),
        "model key": lambda: make_key_pair(folder, "modelkey"),
        "prompts": lambda: (folder / "prompts.jsonl").write_text('{"id": "a", "prompt": "b"}\n'),
        "comparison record": lambda: (folder / "cmp.json").write_text('{"x": 1}'),
    }[change]
    edit()
    problem = policy_binding(statement, load_policy(prod))
    assert problem is not None and "the policy's text is the record's" in problem, problem


def test_an_operator_key_is_not_part_of_the_closure(tmp_path):
    """`--public-key` at verify time adds a signer, never changes which policy it is."""
    prod = _policy(tmp_path / "prod")
    _, extra = make_key_pair(tmp_path, "operator")
    from dflash_guard.trust.policy import Signers

    loaded = load_policy(prod)
    closure = policy_closure(loaded)
    accepted = loaded.accepting(Signers((), (extra,)))
    assert policy_binding(_statement(prod), accepted, closure=closure) is None


def test_a_listing_that_does_not_match_its_digest_is_refused(tmp_path):
    prod = _policy(tmp_path / "prod")
    statement = _statement(prod)
    statement["predicate"]["policy"]["closure"]["files"].pop()
    problem = policy_binding(statement, load_policy(prod))
    assert problem == "the record's policy listing does not match its policy digest"


def test_an_accepted_digest_is_the_operators_choice(tmp_path):
    prod = _policy(tmp_path / "prod")
    statement = _statement(prod)
    (prod.parent / "prompts.jsonl").write_text('{"id": "a", "prompt": "b"}\n')
    digest = "sha256:" + statement["predicate"]["policy"]["digest"]["sha256"]
    assert policy_binding(statement, load_policy(prod)) is not None
    assert policy_binding(statement, load_policy(prod), accepted=(digest,)) is None


def test_an_unreadable_named_file_is_an_input_error(tmp_path):
    prod = _policy(tmp_path / "prod")
    loaded = load_policy(prod)
    (prod.parent / "feeds" / "a.json").unlink()
    (prod.parent / "feeds" / "a.json").mkdir()  # a folder where a file was: still walked
    (prod.parent / "lockkey.pub").unlink()
    with pytest.raises(InputError, match="lockfile public key"):
        policy_closure(loaded)


def test_paths_outside_the_policy_folder_are_named_as_written(tmp_path):
    _, key = make_key_pair(tmp_path, "shared")
    folder = tmp_path / "p"
    path = write_policy(folder, ("  approvals: {identities: [], public_keys: []}",
                                 f"  approvals: {{identities: [], public_keys: [{key}]}}"))
    files = {f.path for f in policy_closure(load_policy(path)).files}
    assert str(key) in files
    moved = tmp_path / "q"
    moved.mkdir()
    (moved / "policy.yaml").write_bytes(path.read_bytes())
    (moved / "prompts.jsonl").write_bytes((folder / "prompts.jsonl").read_bytes())
    assert policy_closure(load_policy(moved / "policy.yaml")).digest == policy_closure(
        load_policy(path)).digest
    json.dumps(policy_closure(load_policy(path)).to_json())  # plain JSON
