"""`launch --check omlx SETTINGS`: oMLX's settings.json (the shape `GlobalSettings.save` writes,
jundot/omlx `omlx/settings.py`) passes on loopback and is refused beyond loopback without a
key, with key verification skipped, or with unauthenticated inference; bad files exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

AUTH = {"api_key": None, "secret_key": None, "skip_api_key_verification": False,
        "allow_unauthenticated_inference": False, "sub_keys": []}


def settings(folder: Path, server: dict[str, object], **auth: object) -> Path:
    """A settings.json as oMLX saves it (the sections this check does not read left out)."""
    path = folder / "settings.json"
    path.write_text(json.dumps({"version": "1.0", "server": {
        "host": "127.0.0.1", "port": 8000, "log_level": "info", "cors_origins": ["*"],
        **server}, "auth": {**AUTH, **auth}}, indent=2))
    return path


@pytest.mark.parametrize("server, auth", [
    ({}, {}),  # oMLX's defaults
    ({"host": "127.0.0.1", "port": 8891}, {}),
    ({"host": "localhost, ::1"}, {"skip_api_key_verification": True}),  # loopback only
    ({"host": ["127.0.0.1", "::ffff:127.0.0.1"]}, {}),
    ({"host": "0.0.0.0"}, {"api_key": "s3cret-key"}),
    ({"bind_address": "192.168.1.9"}, {"api_key": "s3cret-key"}),  # the old name
])
def test_loopback_or_a_key_passes(cli, tmp_path, server, auth):
    result = cli("launch", "--check", "omlx", settings(tmp_path, server, **auth), "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["findings"] == []


@pytest.mark.parametrize("server, auth, where, words", [
    ({"host": "0.0.0.0"}, {}, "server.host", "binds 0.0.0.0 port 8000 without auth.api_key"),
    ({"host": "0.0.0.0", "port": 8891}, {"api_key": "   "}, "server.host",
     "binds 0.0.0.0 port 8891 without auth.api_key"),
    ({"host": "127.0.0.1, 10.0.0.5"}, {}, "server.host", "binds 10.0.0.5 port 8000"),
    ({"host": ["127.0.0.1", "::"]}, {}, "server.host", "binds :: port 8000"),
    ({"host": "127.1"}, {}, "server.host", "binds 127.1"),  # not an address: fails closed
    ({"host": ""}, {}, "server.host", "binds (an empty host)"),
    ({"host": "mac.local"}, {"api_key": "k3y!", "skip_api_key_verification": True},
     "auth.skip_api_key_verification", "key verification skipped"),
    ({"host": "0.0.0.0"}, {"api_key": "k3y!", "allow_unauthenticated_inference": True},
     "auth.allow_unauthenticated_inference", "serves inference without a key"),
])
def test_beyond_loopback_without_a_key_is_refused(cli, tmp_path, server, auth, where, words):
    result = cli("launch", "--check", "omlx", settings(tmp_path, server, **auth), "--json")
    assert result.exit_code == 1, result.stdout + result.stderr
    [finding] = json.loads(result.stdout)["findings"]
    assert finding["rule_id"] == "DG-LAUNCH-EXPOSED" and finding["file"] == where, finding
    assert words in finding["message"], finding


def test_the_text_and_sarif_views_name_the_setting(cli, tmp_path):
    path = settings(tmp_path, {"host": "0.0.0.0"})
    text = cli("launch", "--check", "omlx", path)
    assert text.exit_code == 1 and "server.host" in text.stdout and "refused (omlx" in text.stdout
    sarif = json.loads(cli("launch", "--check", "omlx", path, "--format", "sarif").stdout)
    [result] = sarif["runs"][0]["results"]
    assert result["ruleId"] == "DG-LAUNCH-EXPOSED"


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"server": []}', "`server` is not an object"),
    ('{"server": {"host": 7}}', "server.host is neither a string nor a list of strings"),
    ('{"server": {"host": "0.0.0.0"}, "auth": {"api_key": 5}}', "auth.api_key is not a string"),
    ('{"server": {"host": "0.0.0.0"}, "auth": {"skip_api_key_verification": "no"}}',
     "auth.skip_api_key_verification is not true or false"),
])
def test_a_bad_settings_file_is_one_line_exit_2(cli, tmp_path, content, message):
    path = tmp_path / "settings.json"
    path.write_text(content)
    result = cli("launch", "--check", "omlx", path)
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_omlx_is_check_only_and_takes_one_file(cli, tmp_path):
    launched = cli("launch", "omlx")
    assert launched.exit_code == 2 and "verify-app" in launched.stderr
    none = cli("launch", "--check", "omlx")
    assert none.exit_code == 2 and "settings.json" in none.stderr
    missing = cli("launch", "--check", "omlx", tmp_path / "absent.json")
    assert missing.exit_code == 2 and "cannot read oMLX settings" in missing.stderr
