"""`lock --package` locks a set pip installs with `--require-hashes` (issue 47 item 4): the
closure of the wheels given (their `Requires-Dist`), taken from the wheels beside them, or a
refusal that names what is missing; the export then installs offline from that wheel folder."""

from __future__ import annotations

import subprocess
import sys

from dflash_guard.pins.lockfile import load_lockfile
from tests.support.wheels import make_wheel


def _lock(cli, pair, tmp_path, *packages):
    out = tmp_path / "dflash.lock"
    args = [a for p in packages for a in ("--package", p)]
    return cli("lock", "--target", pair.target, "--drafter", pair.drafter, *args, "-o", out,
               "-q"), out


def _pip_install(requirements, wheels, target):
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--require-hashes", "--no-index",
         "--only-binary=:all:", "--find-links", str(wheels), "--target", str(target),
         "--no-cache-dir", "--disable-pip-version-check", "-r", str(requirements)],
        capture_output=True, text=True, check=False, timeout=300,
        env={"PIP_CONFIG_FILE": "/dev/null", "PATH": "/usr/bin:/bin"})


def test_the_closure_is_locked_and_the_export_installs_with_hashes(cli, local_pair, tmp_path):
    wheels = tmp_path / "wheels"
    app = make_wheel(wheels, "app", "1.0", ("helper>=2,<3", "legacy; python_version < '3'",
                                            "extra-only; extra == 'fast'"))
    make_wheel(wheels, "helper", "1.5")  # too old: not taken
    make_wheel(wheels, "helper", "2.1", ("base==0.3",))
    make_wheel(wheels, "base", "0.3")
    result, lock = _lock(cli, local_pair, tmp_path, str(app))
    assert result.exit_code == 0, result.stderr
    locked = {p.name: p.version for p in load_lockfile(lock).packages}
    assert locked == {"app": "1.0", "helper": "2.1", "base": "0.3"}
    requirements = tmp_path / "requirements.txt"
    assert cli("export", "requirements", "--lock", lock, "-o", requirements).exit_code == 0
    installed = _pip_install(requirements, wheels, tmp_path / "site")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (tmp_path / "site" / "base" / "__init__.py").is_file()


def test_a_package_without_its_dependencies_is_refused_naming_them(cli, local_pair, tmp_path):
    """The interop report's case: `requests` alone exported a file pip refused."""
    wheels = tmp_path / "wheels"
    app = make_wheel(wheels, "app", "1.0", ("helper>=2", "base"))
    make_wheel(wheels, "base", "0.1")
    result, lock = _lock(cli, local_pair, tmp_path, str(app))
    assert result.exit_code == 1 and not lock.exists()
    assert "app==1.0 needs helper>=2" in result.stdout + result.stderr
    assert "base" not in (result.stdout + result.stderr).split("needs", 2)[-1].split(".")[0]


def test_a_locked_version_that_misses_the_need_is_refused(cli, local_pair, tmp_path):
    wheels = tmp_path / "wheels"
    app = make_wheel(wheels, "app", "1.0", ("helper>=2",))
    old = make_wheel(tmp_path / "elsewhere", "helper", "1.0")
    result, _ = _lock(cli, local_pair, tmp_path, str(app), str(old))
    assert result.exit_code == 1
    assert "app==1.0 needs helper>=2, and helper==1.0 is locked" in result.stdout + result.stderr


def test_packages_given_by_hash_only_are_said_to_be_unchecked(cli, local_pair, tmp_path):
    result, _ = _lock(cli, local_pair, tmp_path, f"vllm==0.11.0@sha256:{'a' * 64}")
    assert result.exit_code == 0
    out = cli("lock", "--target", local_pair.target, "--drafter", local_pair.drafter,
              "--package", f"vllm==0.11.0@sha256:{'a' * 64}", "-o", tmp_path / "x.lock")
    assert "dependencies not checked for vllm==0.11.0" in out.stdout + out.stderr
