"""`verify-installed`: an installed distribution against the lock that pins it (issue 36, the
seed's "the dflash CLI documents no telemetry; verify against the installed version").

The real z-lab `dflash` in this environment (the Makefile installs it by the sha256
lockfiles/dflash-client.lock pins) proves out and its network capabilities are listed; a copy
of it changed on disk is refused; a wheel built here and installed by pip shows what the locked
wheel adds over RECORD alone."""

from __future__ import annotations

import base64
import compileall
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dflash_guard.fileio import read_regular
from dflash_guard.trust.installed import find_dist_info, read_record

REPO = Path(__file__).resolve().parents[2]
CLIENT_LOCK = REPO / "lockfiles" / "dflash-client.lock"
ENGINE = "vllm=https://github.com/vllm-project/vllm@a1b2c3d4e5f60718293a4b5c6d7e8f9012345678#v0.11.0"
DFLASH_WHEEL_SHA256 = "b3fe38d9413efc30a952c8b38b34f1dcc696ba6d7b865acbf540a34cc53afaa2"


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./.wheelhouse to find a wheel in
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "no-pip-cache"))  # nor a pip cache
    return tmp_path


def check(cli, *args: object) -> tuple[int, dict]:
    result = cli("verify-installed", *args, "--json")
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)


def test_the_installed_dflash_without_its_wheel_cannot_tell_and_lists_network_use(cli, elsewhere):
    """Q9 (2026-12-06): with no locked wheel at hand, RECORD is compared with nothing the lock
    pins: "cannot tell", exit 1, never OK."""
    code, report = check(cli, "dflash", "--lock", CLIENT_LOCK)
    assert code == 1 and not report["passed"] and report["problems"] == []
    assert report["verdict"] == "cannot-tell"
    assert report["version"] == "0.1.0" and report["proof"] == "record-only"
    assert report["files_checked"] >= 10
    network = report["capabilities"]["network"]
    assert "dflash/benchmark.py:154" in network  # requests.post to the server it benchmarks
    assert "dflash/model_mlx.py:431" in network  # huggingface_hub.snapshot_download
    text = cli("verify-installed", "dflash", "--lock", CLIENT_LOCK).stdout
    network_line = next(line for line in text.splitlines() if line.startswith("network: "))
    assert "CANNOT TELL" in text and "dflash/benchmark.py:154" in network_line
    assert "OK" not in text.splitlines()[-1]


def test_record_is_read_as_importlib_metadata_reads_it():
    dist = importlib.metadata.distribution("dflash")
    dist_info = find_dist_info("dflash", [Path(p) for p in sys.path if p])
    rows = read_record(read_regular(dist_info / "RECORD", 1 << 24), "RECORD")
    theirs = {(str(f), f"{f.hash.mode}={f.hash.value}" if f.hash else None, f.size)
              for f in dist.files or []}
    assert {(r.path, r.hash, r.size) for r in rows} == theirs
    assert dist_info.name == f"dflash-{dist.version}.dist-info"


def test_the_client_lock_and_its_requirements_are_reproducible(cli, builtin_pair, tmp_path):
    lock = tmp_path / "dflash-client.lock"
    assert cli("lock", "--target", builtin_pair.target, "--drafter", builtin_pair.drafter,
               "--engine", ENGINE, "--package", f"dflash==0.1.0@sha256:{DFLASH_WHEEL_SHA256}",
               "-o", lock, "-q").exit_code == 0
    assert lock.read_bytes() == CLIENT_LOCK.read_bytes()
    exported = cli("export", "requirements", "--lock", CLIENT_LOCK).stdout
    assert exported == (REPO / "requirements" / "dflash-client.txt").read_text()


def _copy_dflash(root: Path) -> Path:
    """The installed dflash copied as a venv lays it out (the launcher three folders up), its
    bytecode compiled again for the new paths as pip compiles it."""
    dist_info = find_dist_info("dflash", [Path(p) for p in sys.path if p])
    site = root / "lib" / "python3" / "site-packages"
    for folder in ("dflash", dist_info.name):
        shutil.copytree(dist_info.parent / folder, site / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (root / "bin").mkdir()
    shutil.copy2(Path(sys.executable).parent / "dflash", root / "bin" / "dflash")
    assert compileall.compile_dir(site / "dflash", quiet=1, force=True)
    return site


@pytest.mark.parametrize("tamper", ["none", "same-size edit", "appended", "added module",
                                    "added to dist-info", "bytecode", "removed", "version",
                                    "another bin script"])
def test_a_changed_copy_of_dflash_is_refused(cli, elsewhere, tamper):
    site = _copy_dflash(elsewhere / "venv")
    cli_py = site / "dflash" / "cli.py"
    kind = {
        "same-size edit": "modified", "appended": "size", "added module": "extra",
        "added to dist-info": "extra",
        "bytecode": "bytecode", "removed": "missing", "version": "version",
    }.get(tamper)
    if tamper == "same-size edit":
        text = cli_py.read_text()
        cli_py.write_text(text.replace("import", "imporT", 1))
    elif tamper == "appended":
        with cli_py.open("a") as handle:
            handle.write("\nimport socket\n")
    elif tamper == "added module":
        (site / "dflash" / "telemetry.py").write_text("import urllib.request\n")
    elif tamper == "added to dist-info":
        (next(site.glob("dflash-*.dist-info")) / "entry_points.txt.orig").write_text("x\n")
    elif tamper == "another bin script":  # another distribution's: not dflash's to answer for
        (elsewhere / "venv" / "bin" / "pip").write_text("#!/usr/bin/python\n")
    elif tamper == "bytecode":
        pyc = next((site / "dflash" / "__pycache__").glob("cli.*.pyc"))
        other = next((site / "dflash" / "__pycache__").glob("model.*.pyc"))
        pyc.write_bytes(pyc.read_bytes()[:16] + other.read_bytes()[16:])
    elif tamper == "removed":
        (site / "dflash" / "model.py").unlink()
    elif tamper == "version":
        metadata = next(site.glob("dflash-*.dist-info")) / "METADATA"
        metadata.write_text(metadata.read_text().replace("Version: 0.1.0", "Version: 0.1.1"))
    code, report = check(cli, "dflash", "--lock", CLIENT_LOCK, "--path", site)
    if kind is None:  # no problem, and no locked wheel here (`elsewhere`): cannot tell
        assert code == 1 and report["problems"] == [], report["problems"]
        assert report["verdict"] == "cannot-tell"
        return
    assert code == 1 and not report["passed"]
    assert kind in {p["kind"] for p in report["problems"]}, report["problems"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(folder: Path, module: str) -> Path:
    """A pure-Python wheel of `acme-tool 1.0` whose one module is `module`."""
    files = {
        "acme_tool/__init__.py": module.encode(),
        "acme_tool-1.0.dist-info/METADATA":
            b"Metadata-Version: 2.1\nName: acme-tool\nVersion: 1.0\n",
        "acme_tool-1.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},sha256={_b64(d)},{len(d)}\n" for p, d in files.items())
    record += "acme_tool-1.0.dist-info/RECORD,,\n"
    wheel = folder / "acme_tool-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr("acme_tool-1.0.dist-info/RECORD", record)
    return wheel


def test_the_locked_wheel_catches_what_record_alone_cannot(cli, elsewhere, builtin_pair,
                                                            monkeypatch):
    wheel = _wheel(elsewhere, "import socket\n\n\ndef ping():\n    socket.create_connection("
                              "('example.invalid', 80))\n")
    site = elsewhere / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile",
         "--disable-pip-version-check", "--target", str(site), str(wheel)],
        capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    lock = elsewhere / "acme.lock"
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert cli("lock", "--target", builtin_pair.target, "--drafter", builtin_pair.drafter,
               "--package", f"acme-tool==1.0@sha256:{sha}", "-o", lock, "-q").exit_code == 0
    code, report = check(cli, "acme-tool", "--lock", lock, "--path", site, "--wheel", wheel)
    assert code == 0 and report["proof"] == "wheel", report["problems"]
    assert report["capabilities"]["network"] == ["acme_tool/__init__.py:1",
                                                 "acme_tool/__init__.py:5"]
    assert "acme_tool-1.0.dist-info/INSTALLER" in report["installer_files"]

    # Someone rewrites the module and its RECORD row to match (Q9): RECORD alone agrees with
    # itself, which is "cannot tell" (exit 1, not OK); the locked wheel shows the change.
    module = site / "acme_tool" / "__init__.py"
    new = b"import os\nos.system('id')\n"
    module.write_bytes(new)
    record = next(site.glob("acme_tool-1.0.dist-info")) / "RECORD"
    lines = [f"acme_tool/__init__.py,sha256={_b64(new)},{len(new)}"
             if line.startswith("acme_tool/__init__.py,") else line
             for line in record.read_text().splitlines()]
    record.write_text("\n".join(lines) + "\n")
    code, report = check(cli, "acme-tool", "--lock", lock, "--path", site)
    assert code == 1 and report["proof"] == "record-only" and report["verdict"] == "cannot-tell"
    assert report["problems"] == []
    assert report["capabilities"]["process"] == ["acme_tool/__init__.py:2"]
    code, report = check(cli, "acme-tool", "--lock", lock, "--path", site, "--wheel", wheel)
    assert code == 1 and {p["kind"] for p in report["problems"]} == {"not-the-wheel's"}

    # The same wheel found in pip's HTTP cache (a body file named by URL) is the locked one.
    body = elsewhere / "pip-cache" / "http-v2" / "a" / "b" / "c" / "d" / "e" / ("f" * 56 + ".body")
    body.parent.mkdir(parents=True)
    body.write_bytes(wheel.read_bytes())
    (body.parent / "not-a-wheel.body").write_bytes(b"HTTP cache of something else")
    monkeypatch.setenv("PIP_CACHE_DIR", str(elsewhere / "pip-cache"))
    code, report = check(cli, "acme-tool", "--lock", lock, "--path", site)
    assert code == 1 and report["proof"] == "wheel" and report["wheel"] == str(body)
    monkeypatch.setenv("PIP_CACHE_DIR", str(elsewhere / "no-pip-cache"))

    # A wheel the lock does not pin proves nothing: RECORD-only again.
    (elsewhere / "other").mkdir()
    other = _wheel(elsewhere / "other", "x = 1\n")
    code, report = check(cli, "acme-tool", "--lock", lock, "--path", site, "--wheel", other)
    assert code == 1 and report["proof"] == "record-only"


def test_a_package_the_lock_does_not_pin_is_an_input_error(cli, elsewhere):
    result = cli("verify-installed", "dflash", "--lock", REPO / "lockfiles" / "fixture.lock")
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "pins no package 'dflash'" in result.stderr
    missing = cli("verify-installed", "dflash", "--lock", CLIENT_LOCK, "--path", elsewhere)
    assert missing.exit_code == 2 and "not installed" in missing.stderr


def test_two_installs_in_one_folder_are_refused(cli, elsewhere):
    site = _copy_dflash(elsewhere / "venv")
    shutil.copytree(next(site.glob("dflash-*.dist-info")), site / "dflash-0.0.9.dist-info")
    result = cli("verify-installed", "dflash", "--lock", CLIENT_LOCK, "--path", site)
    assert result.exit_code == 2 and "2 installs of dflash" in result.stderr
