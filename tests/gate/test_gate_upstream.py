"""The upstream a policy names (`upstream:`, issue 46 part 2): locked beside the deploy as
`ROLE-upstream`, it is what the gate holds the role's tokenizer, generation and template files
against. The same files approve; a changed flag the engine reads refuses, with the difference
spelled out, until `review` lists its sha256; an upstream that is not locked, or not proven the
Hub's (an unsigned lock), refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dflash_guard.gate import GateOptions, run_gate
from dflash_guard.pins.lockfile import UPSTREAM_FILES, load_lockfile
from dflash_guard.pins.resolve import build_lock
from tests.support.trust import as_hub, signed_lock, with_artifact, write_lock, write_policy

REPO, COMMIT = "acme/tiny-upstream", "d" * 40
NAMED = ("reviewed_files: []\n", f"reviewed_files: []\nupstream:\n  target: {REPO}@{COMMIT}\n")


def _upstream(source: Path, folder: Path) -> Path:
    """The upstream's files: what an upstream lock keeps of the model at `source`."""
    folder.mkdir(parents=True)
    for name in UPSTREAM_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, folder / name)
    return folder


def _deploy(tmp_path: Path, target: Path, drafter: Path, upstream: Path | None, *,
            sign: bool = True) -> tuple[Path, Path, dict[str, Path]]:
    """(lock, policy naming the upstream, roots) for the pair with `upstream` locked as the
    Hub's `REPO@COMMIT` (or not locked at all)."""
    sources = {"target": str(target), "drafter": str(drafter)}
    roots = {"target": target, "drafter": drafter}
    if upstream is not None:
        sources["target-upstream"] = roots["target-upstream"] = upstream
    lock = build_lock(sources).lock
    if upstream is not None:
        lock = with_artifact(lock, as_hub(lock.artifact("target-upstream"), REPO, COMMIT))
    folder = tmp_path / "deploy"
    if sign:
        path, signers = signed_lock(lock, folder)
        return path, write_policy(folder, NAMED, signers), roots
    folder.mkdir(parents=True)
    return write_lock(lock, folder / "dflash.lock"), write_policy(folder, NAMED), roots


def test_the_upstream_approves_its_own_files_and_refuses_a_change(cli, builtin_pair, tmp_path):
    upstream = _upstream(builtin_pair.target, tmp_path / "upstream")
    target = Path(shutil.copytree(builtin_pair.target, tmp_path / "target"))
    lock, policy, roots = _deploy(tmp_path / "same", target, builtin_pair.drafter, upstream)
    assert run_gate(GateOptions(lock, policy, roots)).approved

    config = target / "tokenizer_config.json"  # transformers then rewrites decoded text
    config.write_text(json.dumps({**json.loads(config.read_text()),
                                  "clean_up_tokenization_spaces": True}))
    lock, policy, roots = _deploy(tmp_path / "changed", target, builtin_pair.drafter, upstream)
    result = run_gate(GateOptions(lock, policy, roots))
    assert not result.approved
    assert ("target/tokenizer_config.json: DG-UPSTREAM-DIFF (high): differs from the "
            "upstream's: 1 difference(s): clean_up_tokenization_spaces: true (upstream false)"
            ) in result.reason, result.reason

    args = [f"--root={role}={folder}" for role, folder in roots.items()]
    reviewed = tmp_path / "reviewed.yaml"
    written = cli("review", "--lock", lock, *args, "--extends", policy,
                  "--reviewer", "me@example.com", "-o", reviewed, "-q")
    assert written.exit_code == 0, written.stdout + written.stderr
    assert "target/tokenizer_config.json: not the upstream's" in reviewed.read_text()
    assert run_gate(GateOptions(lock, reviewed, roots)).approved


def test_an_upstream_the_policy_names_must_be_locked_and_proven(builtin_pair, tmp_path):
    lock, policy, roots = _deploy(tmp_path / "none", builtin_pair.target, builtin_pair.drafter,
                                  None)
    result = run_gate(GateOptions(lock, policy, roots))
    assert not result.approved
    assert (f"the policy's upstream for the target, {REPO}@{COMMIT[:12]}, is not locked: lock "
            f"it with --upstream target={REPO}@{COMMIT}") in result.reason, result.reason

    upstream = _upstream(builtin_pair.target, tmp_path / "upstream")
    lock, policy, roots = _deploy(tmp_path / "unsigned", builtin_pair.target,
                                  builtin_pair.drafter, upstream, sign=False)
    result = run_gate(GateOptions(lock, policy, roots))
    assert not result.approved
    assert "is not proven the Hub's (hub-confirmed, in an unsigned lock)" in result.reason


# a published template of another model (the templates catalog knows it, so only the upstream
# comparison can tell it is not the upstream's)
OTHER_TEMPLATE = (Path(__file__).resolve().parents[1] / "vectors" / "tokenizer-upstream"
                  / "Qwen--Qwen3.5-4B" / "chat_template.jinja")


def test_a_file_beside_the_locked_upstream_is_no_reference(builtin_pair, tmp_path):
    """The upstream folder is read where the gate is told it is: a compared file put beside the
    locked ones (the Hub's upstream ships no chat_template.jinja) made the deploy's planted
    template "the upstream's" and the gate approved. Files of other names beside it (a README,
    a config) are not read and still approve."""
    upstream = _upstream(builtin_pair.target, tmp_path / "upstream")
    target = Path(shutil.copytree(builtin_pair.target, tmp_path / "target"))
    (upstream / "README.md").write_text("not compared")
    shutil.copyfile(builtin_pair.target / "config.json", upstream / "config.json")
    lock, policy, roots = _deploy(tmp_path / "benign", target, builtin_pair.drafter, upstream)
    assert run_gate(GateOptions(lock, policy, roots)).approved

    shutil.copyfile(OTHER_TEMPLATE, target / "chat_template.jinja")
    lock, policy, roots = _deploy(tmp_path / "planted", target, builtin_pair.drafter, upstream)
    shutil.copyfile(OTHER_TEMPLATE, upstream / "chat_template.jinja")  # after the lock
    result = run_gate(GateOptions(lock, policy, roots))
    assert not result.approved
    assert "verify: target-upstream/chat_template.jinja: not in the lock" in result.reason, (
        result.reason)


def test_named_templates_are_locked_with_the_upstream_and_compared(builtin_pair, tmp_path):
    """`additional_chat_templates/*.jinja` (transformers applies `default`, and `tool_use` to
    prompts with tools) are locked with the upstream: the upstream's own approves, a published
    template of another model in their place refuses."""
    upstream = _upstream(builtin_pair.target, tmp_path / "upstream")
    (upstream / "additional_chat_templates").mkdir()
    shutil.copyfile(OTHER_TEMPLATE.parents[1] / "openai--gpt-oss-20b" / "chat_template.jinja",
                    upstream / "additional_chat_templates" / "tool_use.jinja")
    target = Path(shutil.copytree(builtin_pair.target, tmp_path / "target"))
    shutil.copytree(upstream / "additional_chat_templates",
                    target / "additional_chat_templates")
    lock, policy, roots = _deploy(tmp_path / "same", target, builtin_pair.drafter, upstream)
    locked = load_lockfile(lock).artifact("target-upstream")
    assert "additional_chat_templates/tool_use.jinja" in {f.path for f in locked.files}
    result = run_gate(GateOptions(lock, policy, roots))
    assert result.approved, result.reason

    shutil.copyfile(OTHER_TEMPLATE, target / "additional_chat_templates" / "tool_use.jinja")
    lock, policy, roots = _deploy(tmp_path / "other", target, builtin_pair.drafter, upstream)
    result = run_gate(GateOptions(lock, policy, roots))
    assert not result.approved
    assert "target/additional_chat_templates/tool_use.jinja: DG-UPSTREAM-DIFF (high)" in (
        result.reason), result.reason
