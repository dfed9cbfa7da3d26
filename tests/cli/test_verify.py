"""`dflash-guard verify`: byte-exact comparison, tamper detection, stat cache, --download."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from dflash_guard.pins.lockfile import load_lockfile
from dflash_guard.pins.verify import verify_lock
from tests.support.pins import (
    DRAFTER_REPO,
    TARGET_REPO,
    cache_leftovers,
    drafter_files,
    target_files,
    write_cache_snapshot,
    write_folder,
)


@pytest.fixture
def locked(cli, local_pair, tmp_path):
    """A lockfile of the local pair; returns (lock path, target dir, drafter dir)."""
    out = tmp_path / "dflash.lock"
    r = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter, "-o", out)
    assert r.exit_code == 0, r.stderr
    return out, local_pair.target, local_pair.drafter


def unwrap(text: str) -> str:
    """Undo rich's line wrapping of the one-line error (the console wraps at its width)."""
    return text.replace("\n", "")


def assert_ok(result) -> None:
    assert result.exit_code == 0, result.stderr


def verify_json(cli, lock, target, drafter, *extra):
    r = cli("verify", "--lock", lock, "--root", f"target={target}", "--root",
            f"drafter={drafter}", "--format", "json", *extra)
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else None, r


def test_untouched_pair_verifies(cli, locked):
    code, report, _ = verify_json(cli, *locked)
    assert code == 0 and report["passed"] is True and report["problems"] == []
    assert report["locations"]["drafter"] == str(locked[2])


def _problems(report):
    return {(p["role"], p["path"], p["kind"]) for p in report["problems"]}


@pytest.mark.parametrize("name", sorted(set(target_files()) | set(drafter_files())))
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_one_flipped_byte_anywhere_fails(cli, locked, name, where):
    lock, target, drafter = locked
    role, folder = ("drafter", drafter) if name in drafter_files() else ("target", target)
    if name not in (drafter_files() if role == "drafter" else target_files()):
        pytest.fail("fixture mismatch")
    path = folder / name
    data = bytearray(path.read_bytes())
    index = {"start": 0, "middle": len(data) // 2, "end": len(data) - 1}[where]
    data[index] ^= 0x01
    path.write_bytes(bytes(data))
    code, report, _ = verify_json(cli, lock, target, drafter)
    assert code == 1 and _problems(report) == {(role, name, "sha256")}


def test_renamed_added_truncated_and_symlinked_files_are_named(cli, locked, tmp_path):
    lock, target, drafter = locked
    (target / "tokenizer.json").rename(target / "tokenizer.json.bak")
    (drafter / "modeling_evil.py").write_text("import os\n")
    with open(target / "model.safetensors", "r+b") as handle:
        handle.truncate(100)
    outside = write_folder(tmp_path / "outside", {"dflash.py": b"evil = True\n"})
    (drafter / "dflash.py").unlink()
    (drafter / "dflash.py").symlink_to(outside / "dflash.py")
    code, report, r = verify_json(cli, lock, target, drafter)
    assert code == 1
    assert _problems(report) == {
        ("target", "tokenizer.json", "missing"),
        ("target", "tokenizer.json.bak", "extra"),
        ("target", "model.safetensors", "size"),
        ("drafter", "modeling_evil.py", "extra"),
        ("drafter", "dflash.py", "symlink"),
    }
    text = cli("verify", "--lock", lock, "--root", f"target={target}", "--root",
               f"drafter={drafter}")
    assert text.exit_code == 1
    for name in ("tokenizer.json", "modeling_evil.py", "model.safetensors", "dflash.py"):
        assert name in text.stdout


def test_stat_cache_makes_reverify_skip_hashing_but_not_miss_edits(cli, locked):
    lock, target, drafter = locked
    _, forced, _ = verify_json(cli, *locked, "--no-cache")
    assert forced["cache_hits"] == 0 and forced["bytes_hashed"] > 0
    _, second, _ = verify_json(cli, *locked)  # `lock` hashed these files and filled the cache
    assert second["cache_hits"] == second["files_checked"] and second["bytes_hashed"] == 0
    # Same size, mtime put back: the inode change time still differs, so the edit is seen.
    path = target / "model.safetensors"
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    code, report, _ = verify_json(cli, *locked)
    assert code == 1 and _problems(report) == {("target", "model.safetensors", "sha256")}


def test_verify_finds_hub_artifacts_in_the_hf_cache(cli, hf_env, monkeypatch, tmp_path):
    write_cache_snapshot(hf_env, TARGET_REPO, "a" * 40, target_files())
    drafter_snapshot = write_cache_snapshot(hf_env, DRAFTER_REPO, "b" * 40, drafter_files())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lock = tmp_path / "dflash.lock"
    assert_ok(cli("lock", "--target", TARGET_REPO, "--drafter", DRAFTER_REPO, "-o", lock))
    r = cli("verify", "--lock", lock, "--format", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["locations"]["drafter"] == str(drafter_snapshot)
    # Swap a snapshot link to a file outside the repo's cache folder.
    outside = write_folder(tmp_path / "outside", {"dflash.py": b"evil = True\n"})
    (drafter_snapshot / "dflash.py").unlink()
    (drafter_snapshot / "dflash.py").symlink_to(outside / "dflash.py")
    r = cli("verify", "--lock", lock, "--format", "json")
    assert r.exit_code == 1
    assert _problems(json.loads(r.stdout)) == {("drafter", "dflash.py", "symlink")}


def test_download_fetches_checks_and_keeps_the_pinned_snapshot(cli, hub, hf_env, tmp_path):
    lock = tmp_path / "dflash.lock"
    assert_ok(cli("lock", "--target", TARGET_REPO, "--drafter", DRAFTER_REPO, "-o", lock))
    missing = cli("verify", "--lock", lock)
    assert missing.exit_code == 2 and "--download" in missing.stderr
    r = cli("verify", "--lock", lock, "--download", "--format", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    commit = hub.commits[TARGET_REPO]
    snapshot = hf_env / "models--acme--tiny-target" / "snapshots" / commit
    assert json.loads(r.stdout)["locations"]["target"] == str(snapshot)
    assert (snapshot / "model.safetensors").read_bytes() == target_files()["model.safetensors"]
    assert cache_leftovers(hf_env) == []
    assert cli("verify", "--lock", lock).exit_code == 0  # now from the cache, no network


def test_download_of_altered_content_is_not_kept(cli, hub, hf_env, tmp_path):
    lock = tmp_path / "dflash.lock"
    assert_ok(cli("lock", "--target", TARGET_REPO, "--drafter", DRAFTER_REPO, "-o", lock))
    served = hub.root / DRAFTER_REPO / "commits" / hub.commits[DRAFTER_REPO] / "dflash.py"
    served.write_bytes(b"import os; os.system('id')\n")  # the server now lies at the same commit
    r = cli("verify", "--lock", lock, "--download", "--format", "json")
    assert r.exit_code == 1
    assert ("drafter", "dflash.py", "size") in _problems(json.loads(r.stdout))
    assert not (hf_env / "models--acme--tiny-drafter").exists()
    assert cache_leftovers(hf_env) == []


def test_download_hub_error_leaves_no_partial_cache_entry(cli, hub, hf_env, tmp_path):
    lock = tmp_path / "dflash.lock"
    assert_ok(cli("lock", "--target", TARGET_REPO, "--drafter", DRAFTER_REPO, "-o", lock))
    hub.set_fault("truncate", "/blobs/")
    r = cli("verify", "--lock", lock, "--download")
    assert r.exit_code == 2 and "error: hub:" in r.stderr and "truncated" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (hf_env / "models--acme--tiny-target").exists()
    assert cache_leftovers(hf_env) == []


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("  source:", "  sources:", 1), ".sources: unknown field"),
        (lambda t: t + "extra_top: 1\n", "extra_top: unknown field"),
        (lambda t: t.replace("lockfile_version: 3", "lockfile_version: 9"), "unsupported"),
        (lambda t: t.replace(" - config.json\n", " - ../config.json\n", 1), "safe relative"),
        (lambda t: "artifacts: [\n", "not valid YAML"),
        (lambda t: t.replace("tiny-drafter", "tiny-drafter2"), "digest"),
    ],
)
def test_malformed_lockfile_is_an_input_error_naming_the_field(cli, locked, edit, message):
    lock, target, drafter = locked
    lock.write_text(edit(lock.read_text()))
    code, report, r = verify_json(cli, lock, target, drafter)
    assert code == 2 and report is None
    err = unwrap(r.stderr)
    assert message in err and str(lock) in err and "Traceback" not in err


def test_missing_folders_and_roots_are_input_errors(cli, locked, tmp_path):
    lock, target, drafter = locked
    assert cli("verify", "--lock", tmp_path / "nope.lock").exit_code == 2
    r = cli("verify", "--lock", lock, "--root", f"target={target}")
    assert r.exit_code == 2 and "--root drafter=DIR" in unwrap(r.stderr)
    r = cli("verify", "--lock", lock, "--root", f"target={tmp_path / 'gone'}",
            "--root", f"drafter={drafter}")
    assert r.exit_code == 2 and "no such folder" in unwrap(r.stderr)
    r = cli("verify", "--lock", lock, "--root", "nonsense")
    assert r.exit_code == 2


def test_library_api_reports_locations_and_problems(locked):
    lock_path, target, drafter = locked
    lock = load_lockfile(lock_path)
    shutil.copy(target / "config.json", drafter / "extra.json")
    report = verify_lock(lock, {"target": target, "drafter": drafter}, use_cache=False)
    assert not report.passed and report.locations == {"target": target, "drafter": drafter}
    (problem,) = report.problems
    assert (problem.role, problem.path, problem.kind) == ("drafter", "extra.json", "extra")
    assert report.to_json()["problems"][0]["kind"] == "extra"


def test_pinned_remote_code_is_verified_too(cli, hub, hf_env, tmp_path):
    from tests.support.hub_emulator import make_repo
    from tests.support.pins import CODE_REPO

    drafter = "acme/remote-code-drafter"
    make_repo(hub.root, drafter, drafter_files(f"{CODE_REPO}--dflash.DFlashDraftModel"))
    lock = tmp_path / "dflash.lock"
    assert_ok(cli("lock", "--target", TARGET_REPO, "--drafter", drafter, "-o", lock))
    assert_ok(cli("verify", "--lock", lock, "--download"))
    code_snapshot = hf_env / "models--acme--dflash-code" / "snapshots" / hub.commits[CODE_REPO]
    assert (code_snapshot / "dflash.py").is_file()
    # The remote module changes in the cache: verify names it under the code role.
    (code_snapshot / "dflash.py").unlink()
    (code_snapshot / "dflash.py").write_bytes(b"import os  # swapped\n")
    r = cli("verify", "--lock", lock, "--format", "json")
    assert r.exit_code == 1
    assert _problems(json.loads(r.stdout)) == {
        (f"drafter:code:{CODE_REPO}", "dflash.py", "size")
    }
    shutil.rmtree(code_snapshot.parent.parent)
    r = cli("verify", "--lock", lock, "--format", "json")
    assert r.exit_code == 1
    assert _problems(json.loads(r.stdout)) == {
        (f"drafter:code:{CODE_REPO}", "dflash.py", "missing")
    }


def test_text_report_shows_markup_like_file_names_verbatim(cli, locked):
    # A planted file named like rich markup once crashed the text report (traceback, exit 1).
    lock, target, drafter = locked
    (drafter / "w[").mkdir()
    (drafter / "w[" / "b]").write_bytes(b"x")  # listed as `w[/b]`, a closing tag
    (drafter / "[bold]y").write_bytes(b"y")
    r = cli("verify", "--lock", lock, "--root", f"target={target}", "--root", f"drafter={drafter}")
    assert r.exit_code == 1, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert "w[/b]" in r.stdout and "[bold]y" in r.stdout


def test_download_counts_each_locked_file_once(cli, hub, hf_env, tmp_path):
    """Issue 15 item 15: the staged check of a download is not counted as well."""
    lock = tmp_path / "dflash.lock"
    assert_ok(cli("lock", "--target", TARGET_REPO, "--drafter", DRAFTER_REPO, "-o", lock))
    locked = load_lockfile(lock)
    total = sum(len(a.files) + sum(len(c.files) for c in a.code_refs) for a in locked.artifacts)
    r = cli("verify", "--lock", lock, "--download", "--format", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["files_checked"] == total


def test_first_verify_after_lock_says_why_the_cache_answered(cli, locked):
    """`lock` hashes every file and fills the stat cache, so the README's first `verify` is
    answered by it: the OK line says so, and what `--no-cache` does, not a bare count."""
    lock, target, drafter = locked
    roots = ("--root", f"target={target}", "--root", f"drafter={drafter}")
    first = cli("verify", "--lock", lock, *roots, "-q")
    assert first.exit_code == 0
    assert "files match the lockfile (8 unchanged since an earlier lock or verify hashed them: " \
           "the stat cache; --no-cache hashes every byte)" in " ".join(first.stdout.split())
    forced = cli("verify", "--lock", lock, *roots, "-q", "--no-cache")
    assert "files match the lockfile, every byte hashed" in forced.stdout
    (target / "config.json").write_bytes((target / "config.json").read_bytes())  # new ctime
    mixed = cli("verify", "--lock", lock, *roots, "-q")
    assert "(1 hashed now, 7 unchanged since" in mixed.stdout
