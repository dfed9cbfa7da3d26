"""`dflash-guard lock`: local folders, the Hub (through the emulator), the HF cache, refusals."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import yaml

from dflash_guard.pins.lockfile import load_lockfile
from tests.support.hub_emulator import make_repo
from tests.support.pins import (
    CODE_REPO,
    DFLASH_PY,
    DRAFTER_REPO,
    TARGET_REPO,
    cache_leftovers,
    drafter_files,
    target_files,
    write_cache_snapshot,
    write_folder,
)
from tests.support.wheels import make_wheel

VLLM_SHA = "0123456789abcdef0123456789abcdef01234567"


def test_local_folders_lock_deterministically_wherever_they_live(cli, local_pair, tmp_path):
    target, drafter = local_pair.target, local_pair.drafter
    first, second = tmp_path / "a.lock", tmp_path / "b.lock"
    assert cli("lock", "--target", target, "--drafter", drafter, "-o", first).exit_code == 0
    moved = tmp_path / "elsewhere"
    shutil.copytree(target.parent, moved)
    r = cli("lock", "--target", moved / target.name, "--drafter", moved / drafter.name,
            "-o", second)
    assert r.exit_code == 0
    assert first.read_bytes() == second.read_bytes()
    text = first.read_text()
    assert str(tmp_path) not in text
    lock = load_lockfile(first)
    art = lock.artifact("drafter")
    assert (art.source, art.name, art.repo, art.commit) == ("local", "tiny-drafter", None, None)
    assert {f.path for f in art.files} == set(drafter_files())
    expected = hashlib.sha256(drafter_files()["model.safetensors"]).hexdigest()
    assert art.file("model.safetensors").sha256 == expected
    assert yaml.safe_load(text)["digest"] == lock.digest()


def test_hub_sources_pin_commit_and_hash_every_file(cli, hub, hf_env, tmp_path):
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", f"{TARGET_REPO}@v1.0", "--drafter", DRAFTER_REPO,
            "--engine", f"vllm=https://github.com/vllm-project/vllm@{VLLM_SHA}#pr-12345",
            "-o", out, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["lockfile"] == str(out)
    lock = load_lockfile(out)
    target = lock.artifact("target")
    assert (target.source, target.repo, target.revision) == ("hub", TARGET_REPO, "v1.0")
    assert target.commit == hub.commits[TARGET_REPO]
    for name, data in target_files().items():
        locked = target.file(name)
        assert (locked.size, locked.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        assert locked.blob_id is not None
    assert lock.engines[0].commit == VLLM_SHA and lock.engines[0].ref == "pr-12345"
    assert lock.artifact("drafter").code_refs == ()  # auto_map names a local dflash.py
    assert cache_leftovers(hf_env) == []
    # Locking again gives the same bytes.
    again = tmp_path / "again.lock"
    cli("lock", "--target", f"{TARGET_REPO}@v1.0", "--drafter", DRAFTER_REPO,
        "--engine", f"vllm=https://github.com/vllm-project/vllm@{VLLM_SHA}#pr-12345", "-o", again)
    assert again.read_bytes() == out.read_bytes()


def test_an_upstream_locks_only_the_files_compared_with_it(cli, hub, local_pair, tmp_path):
    """`--upstream target=SOURCE`: the Hub repo at its commit, confirmed, with only the files
    the target's are compared with: no weights are listed, fetched or verified."""
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter,
            "--upstream", f"target={TARGET_REPO}@v1.0", "-o", out, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["provenance"]["target-upstream"] == "hub-confirmed"
    upstream = load_lockfile(out).artifact("target-upstream")
    assert (upstream.repo, upstream.commit) == (TARGET_REPO, hub.commits[TARGET_REPO])
    assert [f.path for f in upstream.files] == [
        "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
    assert not [line for line in hub.requests if "model.safetensors" in line]
    # a folder beside the upstream's files holds its weights too: only the locked files count
    folder = write_folder(tmp_path / "upstream", target_files())
    r = cli("verify", "--lock", out, "--root", f"target={local_pair.target}", "--root",
            f"drafter={local_pair.drafter}", "--root", f"target-upstream={folder}")
    assert r.exit_code == 0, r.stdout + r.stderr
    (folder / "tokenizer.json").write_text("{}")
    r = cli("verify", "--lock", out, "--root", f"target={local_pair.target}", "--root",
            f"drafter={local_pair.drafter}", "--root", f"target-upstream={folder}")
    assert r.exit_code == 1 and "tokenizer.json" in r.stdout


@pytest.mark.parametrize("spec", ["gguf=acme/x", "target", "target=", "drafter-upstream=x"])
def test_an_upstream_names_the_target_or_the_drafter(cli, local_pair, tmp_path, spec):
    r = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter,
            "--upstream", spec, "-o", tmp_path / "dflash.lock")
    assert r.exit_code == 2 and "expected ROLE=SOURCE with ROLE target or drafter" in r.stderr


def test_remote_auto_map_repo_is_pinned(cli, hub, tmp_path):
    drafter = "acme/remote-code-drafter"
    make_repo(hub.root, drafter, drafter_files(f"{CODE_REPO}--dflash.DFlashDraftModel"))
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", TARGET_REPO, "--drafter", drafter, "-o", out)
    assert r.exit_code == 0, r.stderr
    (ref,) = load_lockfile(out).artifact("drafter").code_refs
    assert (ref.repo, ref.commit) == (CODE_REPO, hub.commits[CODE_REPO])
    assert [f.path for f in ref.files] == ["dflash.py"]
    assert ref.files[0].sha256 == hashlib.sha256(DFLASH_PY).hexdigest()


def test_remote_auto_map_repo_that_cannot_be_pinned_is_refused(cli, hub, tmp_path):
    drafter = "acme/bad-remote-drafter"
    make_repo(hub.root, drafter, drafter_files("acme/gone--dflash.DFlashDraftModel"))
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", TARGET_REPO, "--drafter", drafter, "-o", out)
    assert r.exit_code == 1
    assert "refused" in r.stdout and "acme/gone" in r.stdout
    assert not out.exists()


@pytest.mark.parametrize(
    ("fault", "source", "message"),
    [
        (None, "acme/does-not-exist", "repository not found"),
        (None, f"{TARGET_REPO}@no-such-branch", "revision not found"),
        ("401", TARGET_REPO, "401"),
        ("500", TARGET_REPO, "HTTP 500"),
        ("hang", TARGET_REPO, "timed out"),
    ],
)
def test_hub_errors_end_in_one_line_and_no_lockfile(cli, hub, hf_env, tmp_path, fault, source,
                                                    message):
    hub.set_fault(fault, "/api/models/")
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", source, "--drafter", DRAFTER_REPO, "-o", out)
    assert r.exit_code == 2
    assert message in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: hub:") and r.stderr.count("error") == 1
    assert not out.exists() and cache_leftovers(hf_env) == []


def test_truncated_download_is_a_hub_error_with_nothing_left(cli, hub, hf_env, tmp_path):
    hub.set_fault("truncate", "/resolve/")
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", TARGET_REPO, "--drafter", DRAFTER_REPO, "-o", out)
    assert r.exit_code == 2 and "error: hub:" in r.stderr
    assert not out.exists() and cache_leftovers(hf_env) == []
    assert list(tmp_path.glob(".dflash.lock.*")) == []


@pytest.mark.parametrize("served", [b"{}", b"{" + b" " * 4_000_000 + b"}"],
                         ids=["other-bytes", "far-longer-than-listed"])
def test_a_download_other_than_listed_is_a_hub_error(cli, hub, hf_env, tmp_path, served):
    """A Hub (or a mirror) serving config.json with other bytes than its listing names, or far
    more of them: refused, and nothing is left behind."""
    hub.served["config.json"] = served
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", TARGET_REPO, "--drafter", DRAFTER_REPO, "-o", out)
    assert r.exit_code == 2, r.stdout
    assert "config.json: downloaded content does not match the listed size/blob id" in r.stderr
    assert not out.exists() and cache_leftovers(hf_env) == []


def test_offline_resolves_from_the_hf_cache(cli, hf_env, monkeypatch, tmp_path):
    commit = "c" * 40
    write_cache_snapshot(hf_env, TARGET_REPO, commit, target_files())
    write_cache_snapshot(hf_env, DRAFTER_REPO, "d" * 40, drafter_files())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", TARGET_REPO, "--drafter", f"{DRAFTER_REPO}@main", "-o", out)
    assert r.exit_code == 0, r.stderr
    target = load_lockfile(out).artifact("target")
    assert (target.source, target.repo, target.commit) == ("hub", TARGET_REPO, commit)
    config = target_files()["config.json"]
    assert target.file("config.json").sha256 == hashlib.sha256(config).hexdigest()
    missing = cli("lock", "--target", "acme/not-cached", "--drafter", DRAFTER_REPO, "-o", out)
    assert missing.exit_code == 2 and "HF_HUB_OFFLINE" in missing.stderr


def test_cache_snapshot_path_is_recorded_as_the_hub_repo(cli, hf_env, local_pair, tmp_path):
    snapshot = write_cache_snapshot(hf_env, TARGET_REPO, "e" * 40, target_files())
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", snapshot, "--drafter", local_pair.drafter, "-o", out)
    assert r.exit_code == 0, r.stderr
    target = load_lockfile(out).artifact("target")
    assert (target.source, target.repo, target.commit) == ("hub", TARGET_REPO, "e" * 40)


def test_escaping_symlink_in_a_local_folder_is_refused(cli, local_pair, tmp_path):
    target, drafter = local_pair.target, local_pair.drafter
    secret = write_folder(tmp_path / "outside", {"secret.py": b"x = 1\n"})
    (drafter / "modeling.py").symlink_to(secret / "secret.py")
    r = cli("lock", "--target", target, "--drafter", drafter, "-o", tmp_path / "x.lock")
    assert r.exit_code == 1 and "modeling.py" in r.stdout


@pytest.mark.parametrize(
    "engine",
    [
        "vllm=https://github.com/vllm-project/vllm@0123abc",  # short SHA
        "vllm=https://github.com/vllm-project/vllm@",  # missing SHA
        "vllm=https://github.com/vllm-project/vllm@v0.11.0",  # a tag instead of a SHA
        "vllm",
    ],
)
def test_short_or_missing_engine_sha_is_an_input_error(cli, local_pair, tmp_path, engine):
    out = tmp_path / "x.lock"
    r = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter,
            "--engine", engine, "-o", out)
    assert r.exit_code == 2 and "--engine" in r.stderr
    assert not out.exists()


def test_packages_and_export_requirements(cli, local_pair, tmp_path):
    wheel = make_wheel(tmp_path, "demo_pkg", "1.2.0")
    given = "a" * 64
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter,
            "--package", f"vllm==0.11.0@sha256:{given}", "--package", wheel, "-o", out)
    assert r.exit_code == 0, r.stderr
    req = tmp_path / "requirements.txt"
    assert cli("export", "requirements", "--lock", out, "-o", req).exit_code == 0
    text = req.read_text()
    assert f"vllm==0.11.0 \\\n    --hash=sha256:{given}" in text
    wheel_sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f"demo_pkg==1.2.0 \\\n    --hash=sha256:{wheel_sha}" in text
    no_hash = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter,
                  "--package", "vllm==0.11.0", "-o", out)
    assert no_hash.exit_code == 2 and "no hash" in no_hash.stderr


def test_lock_json_and_requirements_on_stdout(cli, local_pair, tmp_path):
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter, "--package",
            f"torch==2.13.0@sha256:{'b' * 64}", "-o", out, "--format", "json")
    assert r.exit_code == 0
    report = json.loads(r.stdout)
    assert report["digest"] == load_lockfile(out).digest()
    assert report["artifacts"] == {"target": "local:tiny-target", "drafter": "local:tiny-drafter"}
    r = cli("export", "requirements", "--lock", out)
    assert r.exit_code == 0 and f"torch==2.13.0 \\\n    --hash=sha256:{'b' * 64}" in r.stdout
    bare = tmp_path / "bare.lock"
    r = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter, "-o", bare)
    assert r.exit_code == 0
    r = cli("export", "requirements", "--lock", bare)
    assert r.exit_code == 2 and "no packages" in r.stderr


def test_unwritable_output_is_one_error_line(cli, local_pair, tmp_path):
    # `-o` naming a folder once escaped as an IsADirectoryError ("internal error").
    target, drafter = local_pair.target, local_pair.drafter
    taken = tmp_path / "taken"
    taken.mkdir()
    r = cli("lock", "--target", target, "--drafter", drafter, "-o", taken)
    assert r.exit_code == 2
    assert "cannot write" in r.stderr and "internal error" not in r.stderr
    assert taken.is_dir() and list(taken.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".taken")] == []


def test_swapped_target_and_drafter_are_a_usage_error_at_lock_and_gate(cli, local_pair,
                                                                       tmp_path):
    """Newcomer P5: the roles are read from the configs, so the swap is caught before any
    hashing or check, with the fix in the message."""
    target, drafter = local_pair.target, local_pair.drafter
    out = tmp_path / "swapped.lock"
    r = cli("lock", "--target", drafter, "--drafter", target, "-o", out)
    assert r.exit_code == 2 and "did you swap the target and the drafter" in r.stderr
    assert "DFlashDraftModel" in r.stderr and not out.exists()
    lock = tmp_path / "dflash.lock"
    assert cli("lock", "--target", target, "--drafter", drafter, "-o", lock).exit_code == 0
    g = cli("gate", "--lock", lock, "--policy", "dev", "--root", f"target={drafter}",
            "--root", f"drafter={target}")
    assert g.exit_code == 2 and g.stdout == "" and "--root target=" in g.stderr


def test_a_lock_refusal_is_a_json_document(cli, local_pair, tmp_path):
    """`--format json` always writes a document, a refusal included (issue 34)."""
    secret = write_folder(tmp_path / "outside", {"secret.py": b"x = 1\n"})
    (local_pair.drafter / "modeling.py").symlink_to(secret / "secret.py")
    r = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter,
            "-o", tmp_path / "x.lock", "--format", "json")
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert report["passed"] is False and "modeling.py" in report["reason"]
    assert report["lockfile"] is None and not (tmp_path / "x.lock").exists()
