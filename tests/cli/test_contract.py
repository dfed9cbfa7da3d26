"""The CLI contract every command shares."""

from dflash_guard import __version__


def test_version(cli):
    result = cli("--version")
    assert result.exit_code == 0
    assert __version__ in result.stdout


def test_unknown_command_is_a_usage_error(cli):
    result = cli("no-such-command")
    assert result.exit_code == 2


def test_error_is_one_unwrapped_line(cli, tmp_path):
    missing = tmp_path / ("a-deliberately-long-folder-name-" * 4) / "dflash.lock"
    result = cli("verify", "--lock", missing)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_error_text_is_not_read_as_markup(cli, tmp_path):
    # A path holding rich markup (`[/y]`) once crashed the error printer with a traceback, exit 1.
    missing = tmp_path / "x[/y]" / "[bold]dflash.lock"
    result = cli("verify", "--lock", missing)
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    assert "x[/y]" in result.stderr and "[bold]dflash.lock" in result.stderr


def test_cli_starts_without_importing_torch():
    """lock, verify, scan and gate must not pay torch's import (seconds) at start-up."""
    import subprocess
    import sys

    code = "import sys, dflash_guard._cli; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
