"""Issue 25: evidence, not assertions. What a file the attacker can edit claims counts only with
evidence the tool checks: a signature by a policy signer, git itself, the bytes on disk."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from dflash_guard.errors import InputError
from dflash_guard.pins.resolve import build_lock
from dflash_guard.trust.comparison import comparison_statement, write_comparison
from dflash_guard.trust.evidence import (
    accepts_record,
    load_confirming_lock,
    prompt_set_digest,
)
from dflash_guard.trust.policy import load_policy
from dflash_guard.trust.signing import sign_with_key, verify_lockfile_signature
from dflash_guard.urls import check_recorded_url, has_scheme, http_endpoint
from tests.support.trust import as_hub, copy_folder, make_key_pair, signed_lock, write_lock

URL = "https://github.com/vllm-project/vllm"


# --- URLs: parsed once (N10, N14) ------------------------------------------------------------


@pytest.mark.parametrize(("url", "normal"), [
    ("HTTP://Host.Example:8000//v1//", "http://host.example:8000/v1/"),
    ("https://[::1]:65535/v1", "https://[::1]:65535/v1"),
])
def test_endpoints_are_normalised(url, normal):
    assert http_endpoint(url, "--candidate").geturl() == normal


@pytest.mark.parametrize("url", [
    "https://u:p@h", "https://u@h", "http://h/v1?api_key=x", "http://h/v1?X-Amz-Signature=1",
    "ftp://h", "h:8000", "http://h:0", "http://h:99999", "http://[::1", "http://h/\nx",
])
def test_bad_endpoints_are_one_readable_error(url):
    with pytest.raises(InputError) as info:
        http_endpoint(url, "--candidate")
    assert str(info.value).startswith("--candidate") and "\n" not in str(info.value)
    assert "p@" not in str(info.value) and "api_key=x" not in str(info.value)


@pytest.mark.parametrize("url", [
    "ssh://ghp_SECRETTOKEN@github.com/vllm-project/vllm.git",  # the doc's three cases
    "ghp_SECRETTOKEN@github.com:vllm-project/vllm.git",
    "https://github.com/vllm-project/vllm.git?access_token=ghp_SECRETTOKEN",
    "https://github.com/vllm-project/vllm.git#ghp_SECRETTOKEN",
    "https://ghp_SECRETTOKEN@github.com/vllm-project/vllm",
    "git://ghp_SECRETTOKEN:x@github.com/vllm-project/vllm",
    "oauth2:ghp_SECRETTOKEN@gitlab.com:g/r.git",
])
def test_a_credential_in_any_part_of_an_engine_url_is_refused_never_echoed(url):
    with pytest.raises(InputError) as info:
        check_recorded_url(url, "--engine vllm")
    assert "SECRETTOKEN" not in str(info.value)


@pytest.mark.parametrize("url", ["https://github.com/vllm-project/vllm.git",
                                 "git@github.com:vllm-project/vllm.git",
                                 "ssh://git@github.com/vllm-project/vllm", "file:///srv/vllm"])
def test_plain_engine_urls_are_recorded_unchanged(url):
    assert check_recorded_url(url, "--engine vllm") == url


@pytest.mark.parametrize(("value", "url"), [("HTTPS://h/f", True), ("hTtP://h", True),
                                            ("ftp://h", True), ("./feeds/a.json", False),
                                            ("HTTPS:/h/f", False)])
def test_a_scheme_in_any_case_makes_a_url(value, url):
    assert has_scheme(value) is url


def test_a_policy_feed_url_in_upper_case_is_a_url_and_other_schemes_are_errors(tmp_path):
    base = "extends: default\nname: p\nadvisories:\n  feeds: [{feed}]\n  signers: " \
           "{{identities: [], public_keys: []}}\n  allow_unsigned: true\n  fail_on: low\n" \
           "  max_age_days: 7\n"
    policy = tmp_path / "p.yaml"
    policy.write_text(base.format(feed="HTTPS://Advisories.Example.org/feed.json"))
    assert load_policy(policy).advisories.feeds == ("https://advisories.example.org/feed.json",)
    policy.write_text(base.format(feed="ftp://advisories.example.org/feed.json"))
    with pytest.raises(InputError, match="scheme 'ftp'"):
        load_policy(policy)


# --- lock --confirmed-by (N6) ----------------------------------------------------------------


def test_confirmed_by_needs_a_lock_signed_by_a_policy_signer(locked_pair, tmp_path):
    hub = dataclasses.replace(locked_pair.lock, artifacts=tuple(
        as_hub(a, f"z-lab/{a.role}") for a in locked_pair.lock.artifacts))
    signed, (old, new) = signed_lock(hub, tmp_path / "online")
    policy = tmp_path / "p.yaml"
    policy.write_text(f"extends: default\nname: p\nsignatures:\n{new}\n")
    signers = load_policy(policy).lockfile_signers
    assert load_confirming_lock(signed, signers).artifacts
    forged = write_lock(hub, tmp_path / "forged.lock")  # the doc's forged lock: no signature
    with pytest.raises(InputError, match="does not verify"):
        load_confirming_lock(forged, signers)
    other, _ = make_key_pair(tmp_path, "other")
    sign_with_key(forged, other)  # signed, by someone the policy does not name
    with pytest.raises(InputError, match="does not verify"):
        load_confirming_lock(forged, signers)
    with pytest.raises(InputError, match="names no lockfile signer"):
        load_confirming_lock(signed, load_policy("default").lockfile_signers)


# --- bounded signature reads (N22) and no write through a planted link (N15) ------------------


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "huge"])
@pytest.mark.parametrize("suffix", [".sig", ".sigstore.json"])
def test_a_hostile_signature_file_is_a_refusal_not_a_hang(locked_pair, tmp_path, kind, suffix,
                                                          key_pair):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    sig = lock.with_name(lock.name + suffix)
    if kind == "dev-zero":
        sig.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(sig)
    else:
        with sig.open("wb") as handle:
            handle.truncate(65 * 1024 * 1024)
    policy = load_policy("default")
    signers = dataclasses.replace(policy.lockfile_signers, public_keys=(key_pair[1],))
    checks = verify_lockfile_signature(lock, signers, required=True)
    assert checks and not any(c.ok for c in checks)


def test_signing_never_writes_through_a_planted_partial_link(locked_pair, tmp_path, key_pair):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious user data")
    (tmp_path / ".dflash.lock.sig.partial").symlink_to(victim)
    (tmp_path / ".dflash.lock.sig.tmp").symlink_to(victim)
    sign_with_key(lock, key_pair[0])
    assert victim.read_text() == "precious user data"
    assert (tmp_path / ".dflash.lock.sig.partial").is_symlink()


# --- GGUF comparison records (N7) ------------------------------------------------------------


@pytest.fixture
def gguf_lock(locked_pair, tmp_path):
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    (gguf / "model.gguf").write_bytes(b"GGUF" + bytes(60))
    lock = build_lock({"target": str(locked_pair.target), "drafter": str(locked_pair.drafter),
                       "gguf": str(gguf)}).lock
    return lock, gguf / "model.gguf"


def _record(locked_pair, gguf: Path, out: Path, **summary) -> Path:
    base = {"passed": True, "verdict": "identical", "prompts": 12, "max_new_tokens": 32,
            "hard": 0, "near_ties": 0, "near_tie_margin": 0.05,
            "logprobs": {"passed": True, "max_delta": 1e-5, "tolerance": 0.05},
            "prompt_set": {"name": "builtin", "digest": {
                "sha256": prompt_set_digest(load_policy("default"))}}}
    statement = comparison_statement(target_dir=locked_pair.target, gguf=gguf,
                                     summary={**base, **summary}, conversion=None)
    write_comparison(statement, out)
    return out


def _approvals_policy(tmp_path: Path, public: Path) -> Path:
    policy = tmp_path / "p.yaml"
    policy.write_text(f"extends: default\nname: p\nsignatures:\n  approvals: "
                      f"{{identities: [], public_keys: [{public}]}}\n"
                      "difftest:\n  max_logprob_delta: 0.05\n")
    return policy


def test_a_signed_complete_record_is_evidence(locked_pair, gguf_lock, tmp_path, key_pair):
    lock, gguf = gguf_lock
    record = _record(locked_pair, gguf, tmp_path / "rec.json")
    policy = load_policy(_approvals_policy(tmp_path, key_pair[1]))
    assert "not signed" in accepts_record(record, policy, lock).reason
    sign_with_key(record, key_pair[0])
    assert accepts_record(record, policy, lock).ok
    record.write_text(record.read_text().replace('"prompts": 12', '"prompts": 13'))
    assert not accepts_record(record, policy, lock).ok  # edited after signing


@pytest.mark.parametrize(("change", "reason"), [
    ({"prompts": 0}, "prompts of the policy's 12"),
    ({"prompts": True}, "prompts of the policy's 12"),
    ({"prompt_set": {"name": "x", "digest": "0" * 64}}, "prompt set"),
    ({"prompt_set": {"name": "x", "digest": {"sha256": "0" * 64}}}, "prompt set"),
    ({"passed": "yes"}, "verdict"),
    ({"logprobs": None}, "no logprob check"),
])
def test_a_signed_record_that_tested_nothing_or_other_prompts_is_not(locked_pair, gguf_lock,
                                                                     tmp_path, key_pair, change,
                                                                     reason):
    lock, gguf = gguf_lock
    record = _record(locked_pair, gguf, tmp_path / "rec.json", **change)
    sign_with_key(record, key_pair[0])
    policy = load_policy(_approvals_policy(tmp_path, key_pair[1]))
    assert reason in accepts_record(record, policy, lock).reason


def test_a_signed_one_subject_record_is_not_evidence(locked_pair, gguf_lock, tmp_path, key_pair):
    """The doc's forged record: the GGUF and one target file, signed this time."""
    lock, gguf = gguf_lock
    record = _record(locked_pair, gguf, tmp_path / "rec.json")
    document = json.loads(record.read_text())
    document["subject"] = document["subject"][:2]
    record.write_text(json.dumps(document))
    sign_with_key(record, key_pair[0])
    policy = load_policy(_approvals_policy(tmp_path, key_pair[1]))
    assert "does not cover the locked target" in accepts_record(record, policy, lock).reason


def test_a_record_signed_by_another_key_is_not_evidence(locked_pair, gguf_lock, tmp_path, key_pair):
    lock, gguf = gguf_lock
    record = _record(locked_pair, gguf, tmp_path / "rec.json")
    other, _ = make_key_pair(tmp_path, "other")
    sign_with_key(record, other)
    policy = load_policy(_approvals_policy(tmp_path, key_pair[1]))
    assert not accepts_record(record, policy, lock).ok


def test_a_record_covers_the_hidden_files_a_lock_of_the_folder_locks(locked_pair, tmp_path,
                                                                     key_pair):
    """Issue 34: a record stands for every locked target file, hidden ones included (a
    `.hidden/chat_template.jinja` is read by no one today, but it is locked and verified, so
    evidence that skips it vouches for more than it covers)."""
    target = copy_folder(locked_pair.target, tmp_path / "target")
    (target / ".extra").mkdir()
    (target / ".extra" / "tokenizer_config.json").write_text("{}")
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    (gguf / "model.gguf").write_bytes(b"GGUF" + bytes(60))
    lock = build_lock({"target": str(target), "drafter": str(locked_pair.drafter),
                       "gguf": str(gguf)}).lock
    pair = dataclasses.replace(locked_pair, target=target)
    record = _record(pair, gguf / "model.gguf", tmp_path / "rec.json")
    names = [s["name"] for s in json.loads(record.read_text())["subject"]]
    assert "target/.extra/tokenizer_config.json" in names
    sign_with_key(record, key_pair[0])
    policy = load_policy(_approvals_policy(tmp_path, key_pair[1]))
    assert accepts_record(record, policy, lock).ok
    document = json.loads(record.read_text())
    document["subject"] = [s for s in document["subject"] if ".extra" not in s["name"]]
    record.write_text(json.dumps(document))
    sign_with_key(record, key_pair[0])
    assert ".extra/tokenizer_config.json" in accepts_record(record, policy, lock).reason
