"""The emulator answers the real huggingface_hub client in the Hub's shapes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub import errors as hf_errors

from tests.support.hub_emulator import git_blob_id
from tests.support.pins import DRAFTER_REPO, TARGET_REPO, drafter_files, target_files


def test_model_info_lists_siblings_with_lfs_and_blob_ids(hub):
    info = HfApi(endpoint=hub.url).model_info(TARGET_REPO, files_metadata=True)
    assert info.sha == hub.commits[TARGET_REPO]
    by_name = {s.rfilename: s for s in info.siblings}
    files = target_files()
    assert set(by_name) == set(files)
    weights = by_name["model.safetensors"]
    assert weights.lfs.sha256 == hashlib.sha256(files["model.safetensors"]).hexdigest()
    assert weights.lfs.size == len(files["model.safetensors"])
    config = by_name["config.json"]
    assert config.lfs is None and config.blob_id == git_blob_id(files["config.json"])


def test_tag_resolves_to_the_same_commit(hub):
    info = HfApi(endpoint=hub.url).model_info(TARGET_REPO, revision="v1.0")
    assert info.sha == hub.commits[TARGET_REPO]


def test_paths_info_and_tree(hub):
    api = HfApi(endpoint=hub.url)
    commit = hub.commits[DRAFTER_REPO]
    infos = api.get_paths_info(DRAFTER_REPO, ["dflash.py", "model.safetensors"], revision=commit)
    assert {i.path for i in infos} == {"dflash.py", "model.safetensors"}
    lfs = next(i for i in infos if i.path == "model.safetensors").lfs
    assert lfs.sha256 == hashlib.sha256(drafter_files()["model.safetensors"]).hexdigest()
    tree = list(api.list_repo_tree(DRAFTER_REPO, revision=commit, recursive=True))
    assert {t.path for t in tree} == set(drafter_files())


def test_download_follows_lfs_redirect_into_the_cache(hub, hf_env):
    commit = hub.commits[TARGET_REPO]
    path = hf_hub_download(TARGET_REPO, "model.safetensors", revision=commit,
                           cache_dir=hf_env, endpoint=hub.url)
    assert Path(path).read_bytes() == target_files()["model.safetensors"]
    assert f"/snapshots/{commit}/" in path
    assert any(r.startswith("HEAD /acme/tiny-target/resolve/") for r in hub.requests)


@pytest.mark.parametrize(
    ("repo", "revision", "filename", "error"),
    [
        ("acme/nope", "main", "config.json", hf_errors.RepositoryNotFoundError),
        (TARGET_REPO, "no-such-branch", "config.json", hf_errors.RevisionNotFoundError),
        (TARGET_REPO, "main", "missing.json", hf_errors.RemoteEntryNotFoundError),
    ],
)
def test_unknown_repo_revision_and_path_are_typed_404s(hub, hf_env, repo, revision, filename,
                                                       error):
    with pytest.raises(error):
        hf_hub_download(repo, filename, revision=revision, cache_dir=hf_env, endpoint=hub.url)


def test_faults_reach_the_client(hub):
    api = HfApi(endpoint=hub.url)
    hub.set_fault("500")
    with pytest.raises(hf_errors.HfHubHTTPError) as info:
        api.model_info(TARGET_REPO)
    assert info.value.response.status_code == 500
    hub.set_fault("hang")
    hub.hang_seconds = 2
    with pytest.raises(httpx2.TimeoutException):
        api.model_info(TARGET_REPO, timeout=0.5)


def test_agent_harnesses_is_a_404(hub):
    assert httpx2.get(f"{hub.url}/api/agent-harnesses").status_code == 404


def test_emulator_runs_standalone(tmp_path):
    import subprocess
    import sys

    from tests.support.hub_emulator import make_repo

    make_repo(tmp_path, TARGET_REPO, {"config.json": b"{}"})
    script = Path(__file__).resolve().parents[1] / "support" / "hub_emulator.py"
    proc = subprocess.Popen([sys.executable, str(script), "--repos", str(tmp_path), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("HF_ENDPOINT=http://127.0.0.1:")
        info = HfApi(endpoint=line.split("=", 1)[1]).model_info(TARGET_REPO)
        assert [s.rfilename for s in info.siblings] == ["config.json"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
