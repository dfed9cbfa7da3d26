"""`dflash-guard review`: the reviewer's path past the gate's unreviewed-code refusal. The first
gate on the built-in pair under `default` refuses and names the command; the policy it writes
makes the same gate approve; a code file changed and re-locked afterwards is refused again. The
same for a generation config whose defaults the gate refuses (`reviewed_files`)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path

import pytest

from dflash_guard import rules
from dflash_guard.findings import Finding
from dflash_guard.pins.resolve import build_lock
from dflash_guard.trust.policy import load_policy, parse_policy
from dflash_guard.trust.review import CodeToReview, FileToReview, Review, policy_text
from tests.support.scan_builders import write_gguf
from tests.support.trust import copy_folder, fixture_code_sha256, relock, write_lock

QWEN3 = Path(__file__).resolve().parents[1] / "vectors" / "generation-config" / "qwen3-8b.json"

NETWORK_CODE = b"\nimport socket\n\n\ndef phone_home():\n    socket.create_connection(('x', 1))\n"


def _roots(target, drafter) -> list[str]:
    return ["--root", f"target={target}", "--root", f"drafter={drafter}"]


def _gate(cli, lock, policy, roots, out):
    return cli("gate", "--lock", lock, "--policy", policy, *roots, "--output", out, "-q")


def test_review_writes_the_policy_the_gate_approves(cli, tmp_path, locked_pair):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    roots = _roots(locked_pair.target, locked_pair.drafter)
    refused = _gate(cli, lock, "default", roots, tmp_path / "a.json")
    assert refused.exit_code == 1
    assert "dflash-guard review --lock" in refused.stdout

    shown = cli("review", "--lock", lock, *roots, "-q")
    assert shown.exit_code == 1  # unreviewed code left, nothing written
    assert f"drafter/dflash.py  sha256 {fixture_code_sha256()}" in shown.stdout
    assert "UNREVIEWED: 1 remote-code file" in shown.stdout

    policy = tmp_path / "reviewed.yaml"
    written = cli("review", "--lock", lock, *roots, "--reviewer", "me@example.com",
                  "-o", policy, "-q")
    assert written.exit_code == 0, written.stdout + written.stderr
    text = policy.read_text()
    assert text.startswith("# Written by `dflash-guard review`")
    assert "extends: default\n" in text
    loaded = load_policy(policy)
    assert loaded.extends == "default" and loaded.name == "default-reviewed"
    assert fixture_code_sha256() in loaded.reviewed_sha256
    assert _gate(cli, lock, str(policy), roots, tmp_path / "a.json").exit_code == 0
    # the written policy is a base too (a policy file): nothing is left to review under it
    assert cli("review", "--lock", lock, *roots, "--extends", str(policy)).exit_code == 0
    again = cli("review", "--lock", lock, *roots, "--reviewer", "me", "-o", lock, "-q")
    assert again.exit_code == 2 and "overwrite an input" in again.stderr


def test_a_file_changed_after_the_review_is_refused(cli, tmp_path, locked_pair):
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    roots = _roots(locked_pair.target, locked_pair.drafter)
    policy = tmp_path / "reviewed.yaml"
    assert cli("review", "--lock", lock, *roots, "--reviewer", "me", "-o", policy,
               "-q").exit_code == 0
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    with (drafter / "dflash.py").open("ab") as code:
        code.write(NETWORK_CODE)
    tampered = write_lock(relock(locked_pair, drafter), tmp_path / "tampered.lock")
    new_roots = _roots(locked_pair.target, drafter)
    result = _gate(cli, tampered, str(policy), new_roots, tmp_path / "b.json")
    assert result.exit_code == 1
    assert "drafter/dflash.py: unreviewed remote code" in result.stdout.replace("\n", " ")

    shown = cli("review", "--lock", tampered, *new_roots, "--format", "json", "-q")
    (entry,) = json.loads(shown.stdout)["unreviewed"]
    assert entry["sha256"] != fixture_code_sha256()
    assert "DG-RC-NETWORK" in {c["rule_id"] for c in entry["capabilities"]}
    text = " ".join(cli("review", "--lock", tampered, *new_roots, "-q").stdout.split())
    assert re.search(r"high DG-RC-NETWORK line \d+: ", text)
    assert "the gate still refuses DG-RC-NETWORK at fail_on high, reviewed or not" in text
    # The old lock over the changed folder: nothing is reviewed from bytes the lock does not pin.
    mismatch = cli("review", "--lock", lock, *new_roots, "--reviewer", "me",
                   "-o", tmp_path / "c.yaml", "-q")
    assert mismatch.exit_code == 1 and "MISMATCH" in mismatch.stderr
    assert not (tmp_path / "c.yaml").exists()
    as_json = cli("review", "--lock", lock, *new_roots, "--format", "json", "-q")
    report = json.loads(as_json.stdout)  # the mismatch is the report, not silence on stdout
    assert as_json.exit_code == 1 and report["passed"] is False and report["problems"]


def test_a_scanned_name_cannot_forge_a_policy_key():
    forged = "dflash.py\nwaivers:\n- {id: w, kind: scan, target: DG-RC-NETWORK}"
    review = Review("default", (CodeToReview("drafter", forged, "a" * 64, (), True),))
    policy = parse_policy(policy_text(review, "me", dt.date(2026, 12, 2), "mine"))
    assert not policy.waivers
    assert "a" * 64 in policy.reviewed_sha256


def test_a_generation_config_finding_cannot_forge_a_policy_key():
    """A finding's message quotes values from the untrusted file: it stays one comment line."""
    forged = Finding.of(rules.GENERATION_DEFAULTS, "generation_config.json",
                        "top_k 1\nwaivers:\n- {id: w, kind: scan, target: DG-RC-NETWORK}")
    review = Review("default", (), configs=(
        FileToReview("target", "generation_config.json", "b" * 64, (forged,)),))
    text = policy_text(review, "me", dt.date(2026, 12, 2), "mine")
    policy = parse_policy(text)
    assert not policy.waivers and policy.reviewed_file_sha256 == {"b" * 64}
    assert "#   high DG-GENERATION-DEFAULTS: top_k 1\\x0awaivers:" in text


def _with_generation_config(tmp_path, locked_pair, text: str) -> tuple[Path, Path, list[str]]:
    """The pair with the target's generation_config.json replaced by `text`, locked."""
    target = tmp_path / "target"
    if not target.exists():
        copy_folder(locked_pair.target, target)
    (target / "generation_config.json").write_text(text)
    lock = build_lock({"target": str(target), "drafter": str(locked_pair.drafter)}).lock
    return (target / "generation_config.json", write_lock(lock, tmp_path / "dflash.lock"),
            _roots(target, locked_pair.drafter))


def test_review_offers_a_generation_config_the_gate_refuses(cli, tmp_path, locked_pair):
    config = json.loads((locked_pair.target / "generation_config.json").read_text())
    path, lock, roots = _with_generation_config(
        tmp_path, locked_pair, json.dumps({**config, "repetition_penalty": 1.3}, indent=2))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    refused = _gate(cli, lock, "default", roots, tmp_path / "a.json")
    assert refused.exit_code == 1
    assert ("target/generation_config.json: DG-GENERATION-DEFAULTS (high)"
            in " ".join(refused.stdout.split()))

    shown = cli("review", "--lock", lock, *roots, "--format", "json", "-q")
    assert shown.exit_code == 1
    (entry,) = json.loads(shown.stdout)["unreviewed_files"]
    assert (entry["role"], entry["path"], entry["sha256"]) == (
        "target", "generation_config.json", digest)
    assert "repetition_penalty 1.3" in entry["findings"][0]["message"]
    text = " ".join(cli("review", "--lock", lock, *roots, "-q").stdout.split())
    assert f"target/generation_config.json generation defaults sha256 {digest}" in text
    assert "UNREVIEWED: 1 remote-code file, 1 defaults or tokenizer file;" in text

    policy = tmp_path / "reviewed.yaml"
    written = cli("review", "--lock", lock, *roots, "--reviewer", "me@example.com",
                  "-o", policy, "-q")
    assert written.exit_code == 0, written.stdout + written.stderr
    assert "#   high DG-GENERATION-DEFAULTS: repetition_penalty 1.3" in policy.read_text()
    loaded = load_policy(policy)
    assert loaded.reviewed_file_sha256 == {digest}
    assert "target/generation_config.json, reviewed by me@example.com" in (
        loaded.reviewed_files[0].note)
    approved = _gate(cli, lock, str(policy), roots, tmp_path / "b.json")
    assert approved.exit_code == 0, approved.stdout
    # one byte changed (and locked): another sha256, refused again
    path, lock, roots = _with_generation_config(
        tmp_path, locked_pair, path.read_text().replace("1.3", "1.4"))
    refused = _gate(cli, lock, str(policy), roots, tmp_path / "c.json")
    assert refused.exit_code == 1
    assert "DG-GENERATION-DEFAULTS (high): repetition_penalty 1.4" in " ".join(
        refused.stdout.split())


@pytest.mark.parametrize(("extends", "listed"), [("default", False), ("strict", True)])
def test_a_medium_sampling_default_is_offered_only_at_fail_on_medium(cli, tmp_path, locked_pair,
                                                                     extends, listed):
    """`top_k: 1` off the catalog is medium: default (fail_on high) passes it, strict refuses."""
    _, lock, roots = _with_generation_config(tmp_path, locked_pair, '{"top_k": 1}')
    shown = cli("review", "--lock", lock, *roots, "--extends", extends, "--format", "json", "-q")
    files = json.loads(shown.stdout)["unreviewed_files"]
    assert [(f["path"], f["findings"][0]["severity"]) for f in files] == (
        [("generation_config.json", "medium")] if listed else [])


def test_the_published_qwen3_generation_config_is_not_offered(cli, tmp_path, locked_pair):
    _, lock, roots = _with_generation_config(tmp_path, locked_pair, QWEN3.read_text())
    shown = cli("review", "--lock", lock, *roots, "--extends", "strict", "--format", "json",
                "-q")
    assert json.loads(shown.stdout)["unreviewed_files"] == []


def test_a_tier_that_denies_remote_code_is_named(cli, tmp_path, locked_pair):
    """Under strict a local folder is `unknown`, whose remote code is denied: reviewing it
    cannot get the gate past that, and the review says so (in the policy file too)."""
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    roots = _roots(locked_pair.target, locked_pair.drafter)
    shown = cli("review", "--lock", lock, *roots, "--extends", "strict", "-q")
    assert "`strict` denies remote code for the drafter's tier" in " ".join(shown.stdout.split())
    policy = tmp_path / "strict-reviewed.yaml"
    assert cli("review", "--lock", lock, *roots, "--extends", "strict", "--reviewer", "me",
               "-o", policy, "-q").exit_code == 0
    assert "# Note: `strict` denies remote code for the drafter's tier" in policy.read_text()
    assert load_policy(policy).extends == "strict"
    assert cli("review", "--lock", lock, *roots, "--extends", "dev", "-q").exit_code == 0


def test_review_offers_a_gguf_whose_sampling_defaults_the_gate_refuses(cli, tmp_path,
                                                                       locked_pair):
    """A GGUF's `general.sampling.penalty_repeat` is DG-GENERATION-DEFAULTS (high): the review
    lists the GGUF with the lock's sha256 and writes it to `reviewed_files`, which clears it."""
    target = copy_folder(locked_pair.target, tmp_path / "target")

    def penalised(writer) -> None:
        writer.add_tokenizer_model("llama")
        writer.add_token_list(["<unk>", "<s>", "</s>", "a", "b"])
        writer.add_sampling_penalty_repeat(1.3)

    write_gguf(target / "model.gguf", penalised)
    lock = build_lock({"target": str(target), "drafter": str(locked_pair.drafter)}).lock
    locked = lock.artifact("target").file("model.gguf")
    assert locked is not None
    lock_path = write_lock(lock, tmp_path / "dflash.lock")
    roots = _roots(target, locked_pair.drafter)

    shown = cli("review", "--lock", lock_path, *roots, "--format", "json", "-q")
    assert shown.exit_code == 1
    (entry,) = json.loads(shown.stdout)["unreviewed_files"]
    assert (entry["role"], entry["path"], entry["sha256"]) == (
        "target", "model.gguf", locked.sha256)
    assert "general.sampling.penalty_repeat 1.3" in entry["findings"][0]["message"]
    text = " ".join(cli("review", "--lock", lock_path, *roots, "-q").stdout.split())
    assert f"target/model.gguf GGUF defaults sha256 {locked.sha256}" in text

    policy = tmp_path / "reviewed.yaml"
    written = cli("review", "--lock", lock_path, *roots, "--reviewer", "me@example.com",
                  "-o", policy, "-q")
    assert written.exit_code == 0, written.stdout + written.stderr
    assert load_policy(policy).reviewed_file_sha256 == {locked.sha256}
    again = cli("review", "--lock", lock_path, *roots, "--extends", str(policy), "--format",
                "json", "-q")
    assert json.loads(again.stdout)["unreviewed_files"] == []
