"""N28 end to end: a drafter whose `auto_map` names code in another Hub repo can be approved.

The Hub emulator serves the fixture target, a code repo (`modeling.py`) and the fixture drafter
with `auto_map` `ORG/code--modeling.Model`, laid out as the attack doc has it. `lock` pins the
code repo at the commit it resolved (and each file's sha256), `verify --download` fetches it at
that commit, and the gate approves once `reviewed_code` covers the locked sha256; the same lock
under a policy that has not reviewed it is refused, naming the code.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from dflash_guard.pins.lockfile import load_lockfile
from tests.support.hub_emulator import make_repo
from tests.support.trust import engines_section, release_map, write_policy

CODE = b"import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n"
ENGINE = "vllm=https://github.com/vllm-project/vllm@a1b2c3d4e5f60718293a4b5c6d7e8f9012345678#v0.11.0"
# the policy's evidence that the commit is vLLM's v0.11.0 (the label is none)
ENGINE_PIN = ("https://github.com/vllm-project/vllm", "v0.11.0",
              "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678")
ENGINE_RELEASE = release_map(*ENGINE_PIN)


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.fixture
def cross_repo_lock(cli, hub, builtin_pair, tmp_path: Path):
    """The three repos on the emulator, locked at their commits and downloaded by verify."""
    target, drafter = builtin_pair.target, builtin_pair.drafter
    files = files_of(drafter)
    config = json.loads(files["config.json"])
    config["auto_map"] = {"AutoModel": "z-lab/code--modeling.Model"}
    files["config.json"] = json.dumps(config).encode()
    commits = {
        "target": make_repo(hub.root, "z-lab/target", files_of(target)),
        "code": make_repo(hub.root, "z-lab/code", {"modeling.py": CODE}),
        "drafter": make_repo(hub.root, "z-lab/drafterx", files),
    }
    lock = tmp_path / "cr.lock"
    result = cli("lock", "--target", f"z-lab/target@{commits['target']}",
                 "--drafter", f"z-lab/drafterx@{commits['drafter']}", "--engine", ENGINE,
                 "-o", lock)
    assert result.exit_code == 0, result.stderr
    (ref,) = load_lockfile(lock).artifact("drafter").code_refs
    assert (ref.repo, ref.commit) == ("z-lab/code", commits["code"])  # pinned at a full SHA
    assert [(f.path, f.sha256) for f in ref.files] == [
        ("modeling.py", hashlib.sha256(CODE).hexdigest())]
    # The code repo moves on after the lock: verify and gate still use the locked commit.
    make_repo(hub.root, "z-lab/code", {"modeling.py": CODE + b"import os\nos.system('x')\n"})
    verified = cli("verify", "--lock", lock, "--download")
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    return lock


def test_reviewed_cross_repo_code_is_approved(cli, cross_repo_lock, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "reviewed", ENGINE_RELEASE,
                          reviewed=(hashlib.sha256(CODE).hexdigest(),))
    result = cli("gate", "--lock", cross_repo_lock, "--policy", policy, "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is True
    scan = next(check for check in report["checks"] if check["name"] == "scan")
    assert "2 remote-code files" in scan["reason"]  # dflash.py and z-lab/code's modeling.py


def test_unreviewed_cross_repo_code_is_refused(cli, cross_repo_lock, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "unreviewed", ENGINE_RELEASE)
    result = cli("gate", "--lock", cross_repo_lock, "--policy", policy, "--format", "json")
    assert result.exit_code == 1, result.stdout + result.stderr
    assert json.loads(result.stdout)["passed"] is False
    assert "drafter/z-lab/code--modeling.py: unreviewed remote code" in result.stdout


def test_review_covers_cross_repo_code_by_its_locked_sha256(cli, cross_repo_lock,
                                                           tmp_path: Path) -> None:
    """`review` lists the other repo's module by the sha256 the lock pins (not scanned: the
    folder does not hold it), and the policy it writes gets the same lock approved."""
    shown = json.loads(cli("review", "--lock", cross_repo_lock, "--format", "json",
                           "-q").stdout)
    by_path = {entry["path"]: entry for entry in shown["unreviewed"]}
    assert by_path["z-lab/code--modeling.py"]["sha256"] == hashlib.sha256(CODE).hexdigest()
    assert by_path["z-lab/code--modeling.py"]["scanned"] is False
    assert by_path["dflash.py"]["scanned"] is True
    policy = tmp_path / "reviewed.yaml"
    assert cli("review", "--lock", cross_repo_lock, "--reviewer", "me", "-o", policy,
               "-q").exit_code == 0
    assert "not scanned: another repository serves it" in policy.read_text()
    policy.write_text(policy.read_text() + engines_section(*ENGINE_PIN))
    result = cli("gate", "--lock", cross_repo_lock, "--policy", policy, "-q")
    assert result.exit_code == 0, result.stdout + result.stderr


def test_a_review_of_one_repo_does_not_clear_another_named_in_its_message(
        cross_repo_lock, tmp_path: Path) -> None:
    """The judge clears a cross-repo finding by the repository the finding carries as data,
    never by its text: a config can put any text into the message (here another repo's target
    that spells out the reviewed one's name)."""
    import datetime as dt

    from dflash_guard.findings import Finding, ScanReport
    from dflash_guard.rules import RC_REMOTE_REPO
    from dflash_guard.trust.judge import Judge
    from dflash_guard.trust.policy import load_policy

    policy = load_policy(str(write_policy(tmp_path / "reviewed", ENGINE_RELEASE,
                                          reviewed=(hashlib.sha256(CODE).hexdigest(),))))
    drafter = load_lockfile(cross_repo_lock).artifact("drafter")
    reviewed = Finding.of(RC_REMOTE_REPO, "config.json", "loads code from the repository "
                          "'z-lab/code'", repo="z-lab/code")
    forged = Finding.of(RC_REMOTE_REPO, "config.json", "AutoConfig \"z-lab/evil--repository "
                        "'z-lab/code'.X\" loads code from the repository 'z-lab/evil'",
                        repo="z-lab/evil")
    judge = Judge(policy, dt.date.today(), False)
    for finding, fails in ((reviewed, False), (forged, True)):
        failing, _ = judge.scan(drafter, ScanReport([finding], [], [], None, 1))
        assert (finding in failing) is fails
