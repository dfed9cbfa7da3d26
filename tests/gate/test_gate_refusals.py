"""Every refusal path of the gate: a planted fault makes it refuse, at the right check."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib

import pytest

from dflash_guard.errors import InputError
from dflash_guard.gate import ApprovalSigning, GateOptions, run_gate
from dflash_guard.pins.lockfile import Engine
from dflash_guard.progress import NO_PROGRESS
from dflash_guard.trust.signing import sign_with_key
from kernels_ref.faults import Fault
from tests.support.audit import git
from tests.support.progress import Recorder
from tests.support.trust import (
    DEFAULT_POLICY,
    REPO,
    as_hub,
    copy_folder,
    flip_byte,
    flip_signature_byte,
    make_key_pair,
    one_line,
    release_map,
    relock,
    sign_model_folder,
    signed_lock,
    with_artifact,
    write_lock,
    write_policy,
)

COMMUNITY = "RadixArk/Qwen3.8-27B-DSpark"
PR_ENGINE = Engine("vllm", "https://github.com/vllm-project/vllm", "e" * 40,
                   "refs/pull/52816/head")
# A later check that always refuses: proves every earlier one (e.g. the policy) passed.
REQUIRE_MODEL_SIG = ("  official:\n    signature_required: false",
                     "  official:\n    signature_required: true")


def _gate(tmp_path, locked_pair, lock, *replacements, roots=None, reviewed=(), min_tau=None,
          signed=False, progress=NO_PROGRESS, **kwargs):
    """Gate `lock` under the default policy with `replacements`; `signed`: the lock signed by a
    key the policy accepts (so its hub-confirmed claims count)."""
    if min_tau is not None:
        replacements = (*replacements, ("min_tau: 1.5", f"min_tau: {min_tau}"))
    if signed:
        lock_path, signers = signed_lock(lock, tmp_path / "signed")
        replacements = (*replacements, signers)
    else:
        lock_path = write_lock(lock, tmp_path / "dflash.lock")
    policy = write_policy(tmp_path / "policy", *replacements, reviewed=reviewed)
    return run_gate(GateOptions(lock_path, policy, roots or locked_pair.roots,
                                out=tmp_path / "approval.json", **kwargs), progress)


def _refused_at(result, step: str) -> str:
    assert not result.approved
    assert result.checks[-1].name == step, result.reason
    assert all(c.outcome.ok for c in result.checks[:-1])
    return result.reason


def _model_key_policy(tmp_path):
    _, public = make_key_pair(tmp_path, "models")
    return ("models: {identities: [], public_keys: []}",
            f"models: {{identities: [], public_keys: [{public}]}}")


def test_gate_refuses_tampered_drafter(tmp_path, locked_pair):
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    weights = next(p for p in drafter.iterdir() if p.suffix == ".safetensors")
    flip_byte(weights, weights.stat().st_size - 1)
    result = _gate(tmp_path, locked_pair, locked_pair.lock,
                   roots={"target": locked_pair.target, "drafter": drafter})
    assert f"drafter/{weights.name}: sha256 differs" in _refused_at(result, "verify")
    assert not (tmp_path / "approval.json").exists()


def test_a_refused_gate_reports_each_check_it_ran_and_ends_them_all(tmp_path, locked_pair):
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    weights = next(p for p in drafter.iterdir() if p.suffix == ".safetensors")
    flip_byte(weights, weights.stat().st_size - 1)
    recorder = Recorder()
    _gate(tmp_path, locked_pair, locked_pair.lock,
          roots={"target": locked_pair.target, "drafter": drafter}, progress=recorder)
    assert [(s.depth, s.name) for s in recorder.stages] == [
        (0, "gate"), (1, "lockfile"), (1, "lockfile signature"), (1, "verify"),
        (2, "hashing target"), (2, "hashing drafter")]
    assert recorder.open == [] and all(s.ended for s in recorder.stages)
    assert recorder.named("gate").amounts == [1, 1, 1]  # three checks ran, the last refused


def test_gate_refuses_short_sha(tmp_path, locked_pair):
    short = as_hub(locked_pair.lock.artifact("drafter"), "z-lab/Qwen3.8-27B-DFlash2",
                   revision="abc1234")
    result = _gate(tmp_path, locked_pair, with_artifact(locked_pair.lock, short))
    assert "revision 'abc1234' is not a full SHA" in _refused_at(result, "lockfile")
    branch = as_hub(locked_pair.lock.artifact("drafter"), "z-lab/Qwen3.8-27B-DFlash2",
                    revision="main")
    result = _gate(tmp_path, locked_pair, with_artifact(locked_pair.lock, branch))
    assert "revision 'main' is not a full SHA" in _refused_at(result, "lockfile")


def test_gate_refuses_community_drafter_without_staging(tmp_path, locked_pair):
    community = as_hub(locked_pair.lock.artifact("drafter"), COMMUNITY)
    lock = with_artifact(locked_pair.lock, community)
    reason = _refused_at(_gate(tmp_path, locked_pair, lock, signed=True), "policy")
    assert f"drafter {COMMUNITY}@cccccccccccc (community tier) has no recorded staging" in reason
    staged = ("staging_approvals: []\n", f"""staging_approvals:
  - artifact: {COMMUNITY}@{"c" * 40}
    approver: carol@example.com
    date: 2026-09-01
""")
    result = _gate(tmp_path, locked_pair, lock, staged, REQUIRE_MODEL_SIG,
                   _model_key_policy(tmp_path), signed=True)
    _refused_at(result, "model signatures")
    # The same lock unsigned: its hub-confirmed claim does not count, the drafter is a local
    # folder (official under the default policy), and the gate says why.
    result = _gate(tmp_path, locked_pair, lock, staged, REQUIRE_MODEL_SIG,
                   _model_key_policy(tmp_path))
    assert "hub-confirmed not trusted" in result.checks[1].outcome.reason


def test_gate_refuses_expired_waiver(tmp_path, locked_pair):
    expired = ("waivers: []\n", """waivers:
  - id: W-7
    covers: engine:vllm
    reason: PR build while DFlash support lands
    owner: alice@example.com
    expires: 2026-01-31
""")
    result = _gate(tmp_path, locked_pair, locked_pair.lock, expired, today=dt.date(2026, 2, 1))
    assert "waiver W-7 (engine:vllm) expired on 2026-01-31" in _refused_at(result, "policy")


def test_gate_refuses_pr_head_engine_without_waiver(tmp_path, locked_pair):
    lock = dataclasses.replace(locked_pair.lock, engines=(PR_ENGINE,))
    reason = _refused_at(_gate(tmp_path, locked_pair, lock), "policy")
    assert "engine vllm is a PR-head build (label 'refs/pull/52816/head'" in reason
    waiver = ("waivers: []\n", """waivers:
  - id: W-8
    covers: engine:vllm
    reason: DFlash support only on the PR branch
    owner: alice@example.com
    expires: 2099-12-31
""")
    result = _gate(tmp_path, locked_pair, lock, waiver, REQUIRE_MODEL_SIG,
                   _model_key_policy(tmp_path))
    _refused_at(result, "model signatures")
    no_pr = ("allow_pr_head: true", "allow_pr_head: false")
    reason = _refused_at(_gate(tmp_path, locked_pair, lock, waiver, no_pr), "policy")
    assert "the policy allows no PR-head or unproven build" in reason


def test_gate_refuses_non_release_engine_when_required(tmp_path, locked_pair):
    """P7: `#main` (or no label) proves no mainline build: without evidence it is an unproven
    build (a waiver at most), and `require_release` wants the policy's release evidence."""
    for label in ("main", None):
        branch = Engine("sglang", "https://github.com/sgl-project/sglang", "f" * 40, label)
        lock = dataclasses.replace(locked_pair.lock, engines=(branch,))
        reason = _refused_at(_gate(tmp_path, locked_pair, lock), "policy")
        assert "engine sglang is not proven a release or mainline build" in reason
        assert "without a waiver (engine:sglang)" in reason
    waiver = ("waivers: []\n", "waivers:\n  - id: W-9\n    covers: engine:sglang\n    reason: "
              "trying it\n    owner: a@example.com\n    expires: 2099-12-31\n")
    release = ("require_release: false", "require_release: true")
    reason = _refused_at(_gate(tmp_path, locked_pair, lock, waiver, release), "policy")
    assert "engine sglang is not a proven release build (label 'none' proves nothing" in reason


def test_gate_counts_the_policys_release_evidence_not_the_clones_tags(tmp_path, locked_pair):
    """Q6: a tag made in the `--engine-repo` clone made any commit a release; only the policy's
    release map (or a tag signed by a key it lists) does now, whatever URL or label the lock
    gives (Q5: a mirror URL with the pinned commit is that release)."""
    clone = tmp_path / "clone"
    clone.mkdir()
    git(clone, "init", "-q", "-b", "main")
    git(clone, "commit", "-q", "--allow-empty", "-m", "x")
    commit = git(clone, "rev-parse", "HEAD")
    git(clone, "tag", "v0.99.0", commit)
    release = ("require_release: false", "require_release: true")
    upstream = Engine("vllm", "https://github.com/vllm-project/vllm.git", commit, "v0.99.0")
    lock = dataclasses.replace(locked_pair.lock, engines=(upstream,))
    no_pr = ("allow_pr_head: true", "allow_pr_head: false")
    reason = _refused_at(_gate(tmp_path, locked_pair, lock, release, no_pr,
                               engine_repos={"vllm": clone}), "policy")
    assert "engine vllm is not a proven release build (label 'v0.99.0' proves nothing" in reason
    mirror = Engine("vllm", "https://git.example.invalid/mirrors/vllm.git", commit, "main")
    pinned = release_map("https://github.com/vllm-project/vllm", "v0.99.0", commit)
    for engine in (upstream, mirror):
        lock = dataclasses.replace(locked_pair.lock, engines=(engine,))
        result = _gate(tmp_path, locked_pair, lock, pinned, release, no_pr, REQUIRE_MODEL_SIG,
                       _model_key_policy(tmp_path))
        _refused_at(result, "model signatures")  # the policy step passed


def test_gate_refuses_unreviewed_remote_code(tmp_path, locked_pair):
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    code = drafter / "modeling_dflash.py"
    code.write_text("import torch\n\n\nclass DFlashDraftModel(torch.nn.Module):\n    pass\n")
    lock = relock(locked_pair, drafter)
    roots = {"target": locked_pair.target, "drafter": drafter}
    reason = _refused_at(_gate(tmp_path, locked_pair, lock, roots=roots), "scan")
    assert "drafter/modeling_dflash.py" in reason and "unreviewed" in reason
    digest = hashlib.sha256(code.read_bytes()).hexdigest()
    result = _gate(tmp_path, locked_pair, lock, REQUIRE_MODEL_SIG, _model_key_policy(tmp_path),
                   roots=roots, reviewed=(digest,))
    _refused_at(result, "model signatures")


def test_gate_refuses_pickle_weights_under_strict(tmp_path, locked_pair):
    torch = pytest.importorskip("torch")
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    # a name no engine's rules place (a pytorch_model.bin beside model.safetensors is one vLLM
    # drops: not loaded, so not counted): a loader may read it, so it is judged
    torch.save({"w": torch.zeros(2)}, drafter / "extra_state.pkl")
    lock = relock(locked_pair, drafter)
    roots = {"target": locked_pair.target, "drafter": drafter}
    private, public = make_key_pair(tmp_path)
    lock_path = write_lock(lock, tmp_path / "dflash.lock")
    sign_with_key(lock_path, private)
    strict = (REPO / "policies" / "strict.yaml").read_text()
    _, models = make_key_pair(tmp_path, "models")
    keyed = (
        "  lockfile: {identities: [], public_keys: []}\n  models: {identities: [], "
        "public_keys: []}",
        f"  lockfile: {{identities: [], public_keys: [{public}]}}\n  models: {{identities: "
        f"[], public_keys: [{models}]}}",
    )
    policy = write_policy(tmp_path / "strict", keyed,
                          base=strict.replace("max_new_tokens: 64", "max_new_tokens: 32"))
    result = run_gate(GateOptions(lock_path, policy, roots, out=tmp_path / "approval.json"))
    assert "pickle-format weights are not allowed for the unknown tier" in _refused_at(
        result, "scan")
    assert result.checks[1].outcome.reason.startswith("signed by key")


def test_gate_refuses_drafter_over_param_budget(tmp_path, locked_pair):
    """The budget is a policy rule: enforced whatever scan.fail_on says."""
    budget = ("max_params: 4000000000", "max_params: 1000")
    reason = _refused_at(_gate(tmp_path, locked_pair, locked_pair.lock, budget), "scan")
    assert "parameters exceed the policy's budget of 1,000" in reason


def test_gate_refuses_bad_lockfile_signature(tmp_path, locked_pair):
    private, public = make_key_pair(tmp_path)
    lock_path = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    sig = sign_with_key(lock_path, private)
    sig.write_bytes(flip_signature_byte(sig.read_bytes()))
    accepted = ("lockfile: {identities: [], public_keys: []}",
                f"lockfile: {{identities: [], public_keys: [{public}]}}")
    policy = write_policy(tmp_path / "policy", accepted)
    result = run_gate(GateOptions(lock_path, policy, locked_pair.roots))
    assert "dflash.lock.sig" in _refused_at(result, "lockfile signature")


def test_gate_refuses_lockfile_signed_by_another_key(tmp_path, locked_pair):
    private, _ = make_key_pair(tmp_path, "mallory")
    _, public = make_key_pair(tmp_path, "release")
    lock_path = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    sign_with_key(lock_path, private)
    accepted = ("lockfile: {identities: [], public_keys: []}",
                f"lockfile: {{identities: [], public_keys: [{public}]}}")
    required = ("lockfile_required: false", "lockfile_required: true")
    result = run_gate(GateOptions(lock_path, write_policy(tmp_path / "p", accepted, required),
                                  locked_pair.roots))
    assert "does not verify with this key" in _refused_at(result, "lockfile signature")
    (tmp_path / "dflash.lock.sig").unlink()
    result = run_gate(GateOptions(lock_path, write_policy(tmp_path / "p", accepted, required),
                                  locked_pair.roots))
    assert "requires a signed lockfile; none found" in _refused_at(result, "lockfile signature")


def test_gate_refuses_model_signature_over_other_bytes(tmp_path, locked_pair):
    private, public = make_key_pair(tmp_path)
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    sign_model_folder(drafter, private)
    roots = {"target": locked_pair.target, "drafter": drafter}
    keys = ("models: {identities: [], public_keys: []}",
            f"models: {{identities: [], public_keys: [{public}]}}")
    # Signed as locked: the signature check passes (the gate goes on to the diff test).
    signed = _gate(tmp_path, locked_pair, relock(locked_pair, drafter), keys, roots=roots,
                   min_tau=99)
    assert _refused_at(signed, "difftest")
    assert signed.checks[-2].outcome.reason.startswith("drafter by key key.pub")
    config = drafter / "config.json"
    config.write_text(config.read_text() + "\n")  # changed after signing, then locked
    result = _gate(tmp_path, locked_pair, relock(locked_pair, drafter), keys, roots=roots)
    reason = _refused_at(result, "model signatures")
    assert "drafter/model.sig" in reason and "config.json" in reason


def test_gate_refuses_failing_difftest(tmp_path, locked_pair):
    result = _gate(tmp_path, locked_pair, locked_pair.lock, inject=Fault.ACCEPT_OFF_BY_ONE)
    assert "diverge from the target's greedy output" in _refused_at(result, "difftest")
    assert not (tmp_path / "approval.json").exists()


def test_gate_refuses_an_inert_drafter_under_default(tmp_path, locked_pair):
    """A drafter of random (finite) weights passes every file check and diff-tests identical,
    as any drafter must; it accepts nothing (tau 1.00), below default's measured minimum."""
    import torch
    from safetensors.torch import load_file, save_file

    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    weights = drafter / "model.safetensors"
    generator = torch.Generator().manual_seed(0)
    save_file({name: (torch.randn(t.shape, generator=generator) * 0.02).to(t.dtype)
               for name, t in load_file(weights).items()}, weights)
    roots = {"target": locked_pair.target, "drafter": drafter}
    result = _gate(tmp_path, locked_pair, relock(locked_pair, drafter), roots=roots)
    assert "mean acceptance length 1.00 is below the policy's minimum 1.5" in _refused_at(
        result, "difftest")


def test_gate_input_errors_are_exit_2(cli, tmp_path, locked_pair):
    result = cli("gate", "--lock", tmp_path / "missing.lock", "--policy", DEFAULT_POLICY)
    assert result.exit_code == 2 and "cannot read lockfile" in one_line(result.stderr)
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEFAULT_POLICY.read_text().replace("scan:\n", "scans:\n"))
    result = cli("gate", "--lock", lock, "--policy", bad)
    assert result.exit_code == 2 and "scans: unknown field" in one_line(result.stderr)
    with pytest.raises(InputError, match="exclusive"):
        run_gate(GateOptions(lock, DEFAULT_POLICY, locked_pair.roots,
                             signing=ApprovalSigning(sigstore=True, key=tmp_path / "k.pem")))


def test_gate_sign_without_credential_fails_before_any_check(tmp_path, locked_pair, monkeypatch):
    for name in ("GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "CIRCLECI"):
        monkeypatch.delenv(name, raising=False)
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    with pytest.raises(InputError, match="no ambient OIDC credential"):
        run_gate(GateOptions(lock, DEFAULT_POLICY, locked_pair.roots, out=tmp_path / "a.json",
                             signing=ApprovalSigning(sigstore=True)))
    assert not (tmp_path / "a.json").exists()


def test_gate_text_report_shows_markup_like_names_verbatim(cli, tmp_path, locked_pair):
    # A planted file listed as `w[/b]` once crashed the text table: exit 2, not a refusal.
    drafter = copy_folder(locked_pair.drafter, tmp_path / "drafter")
    (drafter / "w[").mkdir()
    (drafter / "w[" / "b]").write_bytes(b"x")
    lock = write_lock(locked_pair.lock, tmp_path / "dflash.lock")
    result = cli("gate", "--lock", lock, "--policy", DEFAULT_POLICY, "--root",
                 f"target={locked_pair.target}", "--root", f"drafter={drafter}")
    assert result.exit_code == 1, result.stderr
    assert "drafter/w[/b]: not in the lock" in one_line(result.stdout)
