"""Control characters in untrusted strings never reach the terminal raw (issue 15, item 7):
file names, folder names and error messages are shown with visible escapes."""

from __future__ import annotations

import io

import pytest

from dflash_guard.formats.terminal import safe_console, terminal_safe
from tests.support.pins import drafter_files, target_files, write_folder

HOSTILE = "a\x1b]0;pwned\x07b\x1b[2Jc\rd\x9be\u202ef\x7f"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e", "\x7f")


def assert_no_raw_controls(text: str) -> None:
    leaked = [repr(char) for char in RAW if char in text]
    assert not leaked, f"raw control characters reached the output: {leaked}"


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[2J", "\\x1b[2J"),
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
    ("line\rover", "line\\x0dover"),
    ("c1\x9bcontrol", "c1\\x9bcontrol"),
    ("bidi\u202eoverride\u2066", "bidi\\u202eoverride\\u2066"),
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("two\nlines", "two\\x0alines"),
    ("plain ünïcødé 模型 ok", "plain ünïcødé 模型 ok"),
])
def test_terminal_safe_shows_every_control_as_an_escape(raw, shown):
    assert terminal_safe(raw) == shown


def test_terminal_safe_can_keep_the_tools_own_newlines():
    assert terminal_safe("one\n\ttwo\x1b", keep_newlines=True) == "one\n\ttwo\\x1b"


def test_the_console_escapes_strings_a_renderer_forgot():
    buffer = io.StringIO()
    console = safe_console(file=buffer, width=200, color_system=None)
    console.print(f"plain {HOSTILE}", markup=False)
    from rich.table import Table
    table = Table(title=HOSTILE)
    table.add_column("path")
    table.add_row(HOSTILE)
    console.print(table)
    assert_no_raw_controls(buffer.getvalue())
    assert "\\x1b]0;pwned" in buffer.getvalue()


@pytest.fixture
def hostile_pair(tmp_path):
    """A pair whose target folder name and one extra file name carry control characters."""
    target = write_folder(tmp_path / f"target{HOSTILE}", target_files())
    drafter = write_folder(tmp_path / "drafter", drafter_files())
    return target, drafter


def test_lock_and_verify_escape_file_and_folder_names(cli, hostile_pair, tmp_path):
    target, drafter = hostile_pair
    out = tmp_path / "dflash.lock"
    lock = cli("lock", "--target", target, "--drafter", drafter, "-o", out)
    assert lock.exit_code == 0, lock.stderr
    assert_no_raw_controls(lock.stdout + lock.stderr)
    assert "\\x1b]0;pwned" in lock.stdout
    (target / f"extra{HOSTILE}.bin").write_bytes(b"added")
    verify = cli("verify", "--lock", out, "--root", f"target={target}",
                 "--root", f"drafter={drafter}")
    assert verify.exit_code == 1, verify.stderr
    assert_no_raw_controls(verify.stdout + verify.stderr)
    assert "\\x1b]0;pwned" in verify.stdout.replace("\n", "")


def test_an_error_line_escapes_the_path_it_names(cli, tmp_path):
    result = cli("verify", "--lock", tmp_path / f"missing{HOSTILE}.lock")
    assert result.exit_code == 2
    assert_no_raw_controls(result.stderr)
    assert "\\x1b[2J" in result.stderr.replace("\n", "")


def test_scan_escapes_file_names_in_its_table(cli, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / f"payload{HOSTILE}.so").write_bytes(b"\x7fELF not really")
    result = cli("scan", folder)
    assert result.exit_code == 1, result.stderr
    assert_no_raw_controls(result.stdout + result.stderr)
    assert "\\x1b" in result.stdout
