"""The CLI contract every command shares."""

from dflash_guard import __version__


def test_version(cli):
    result = cli("--version")
    assert result.exit_code == 0
    assert __version__ in result.stdout


def test_unknown_command_is_a_usage_error(cli):
    result = cli("no-such-command")
    assert result.exit_code == 2
