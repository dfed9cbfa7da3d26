"""`launch --check omlx SETTINGS`: oMLX's `settings.json` against the security page's rule for
GUI servers: the API and the admin dashboard (served by the same server, under `/admin`) stay
on loopback, or require a key.

The format is oMLX's own (jundot/omlx, `omlx/settings.py` at commit
004308c9cfb0b1f67d710d219a2c59a281364269): a JSON object whose `server` section has `host` (a
string, several binds separated by commas, or a list; `bind_address` is its old name; default
127.0.0.1) and `port`, and whose `auth` section has `api_key`, `skip_api_key_verification` (which
also opens the admin dashboard, `omlx/admin/auth.py`) and `allow_unauthenticated_inference`.
The rule is the one oMLX's `validate()` applies (`network_auth_error` in `omlx/utils/network.py`):
every bind loopback, or a non-blank key and no skipped verification; and here also no
unauthenticated inference beyond loopback. OMLX_HOST, OMLX_API_KEY and the `--host`/`--api-key`
flags override the file when oMLX starts: this check cannot see them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dflash_guard import rules
from dflash_guard.errors import InputError
from dflash_guard.fileio import read_input_json
from dflash_guard.findings import Finding
from dflash_guard.launch.check import DETECTOR, LaunchCheckReport
from dflash_guard.urls import is_loopback

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000  # ServerSettings.port; the macOS app's dashboard is often 8891


def _section(settings: dict[str, object], name: str) -> dict[str, object]:
    value = settings.get(name, {})
    if not isinstance(value, dict):
        raise InputError(f"oMLX settings: `{name}` is not an object")
    return value


def _hosts(server: dict[str, object]) -> list[str]:
    """The bind addresses, as oMLX splits them (a list is joined with commas first)."""
    value = server.get("host", server.get("bind_address", DEFAULT_HOST))
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        value = ", ".join(value)
    if not isinstance(value, str):
        raise InputError("oMLX settings: server.host is neither a string nor a list of strings")
    return [part.strip() for part in value.split(",") if part.strip()]


def _flag(auth: dict[str, object], name: str) -> bool:
    value = auth.get(name, False)
    if not isinstance(value, bool):
        raise InputError(f"oMLX settings: auth.{name} is not true or false")
    return value


@dataclasses.dataclass(frozen=True)
class SettingsReport(LaunchCheckReport):
    """`launch --check omlx`'s report: the findings about one settings file (`lock_path`)."""

    def summary(self) -> str:
        if self.passed:
            return ("launch check: passed (omlx: its API and admin dashboard bind loopback, or "
                    "require a key)")
        return f"launch check: refused (omlx: {len(self.findings)} finding(s), worst high)"


def check_settings(arguments: list[str]) -> LaunchCheckReport:
    """Check the oMLX `settings.json` named by `arguments` (exactly one path)."""
    if len(arguments) != 1:
        raise InputError("launch --check omlx: give the path of oMLX's settings.json "
                         "(~/.omlx/settings.json by default)")
    path = Path(arguments[0]).expanduser()
    settings = read_input_json(path, "oMLX settings")
    if not isinstance(settings, dict):
        raise InputError(f"oMLX settings {path}: not a JSON object")
    server, auth = _section(settings, "server"), _section(settings, "auth")
    hosts = _hosts(server)
    port = server.get("port", DEFAULT_PORT)
    key = auth.get("api_key")
    if key is not None and not isinstance(key, str):
        raise InputError("oMLX settings: auth.api_key is not a string")
    exposed = [h for h in hosts if not is_loopback(h)] if hosts else ["(an empty host)"]
    findings = []
    if exposed:
        where = f"{', '.join(exposed)} port {port}"
        if _flag(auth, "skip_api_key_verification"):
            findings.append(_finding("auth.skip_api_key_verification", f"binds {where} with "
                                     "key verification skipped: the API and the admin "
                                     "dashboard answer anyone who reaches the port"))
        elif not (key or "").strip():
            findings.append(_finding("server.host", f"binds {where} without auth.api_key: "
                                     "anyone who reaches the port can use the API and the "
                                     "admin dashboard"))
        if _flag(auth, "allow_unauthenticated_inference"):
            findings.append(_finding("auth.allow_unauthenticated_inference", f"binds {where} "
                                     "and serves inference without a key"))
    return SettingsReport("omlx", (str(path),), tuple(findings), lock_path=str(path))


def _finding(setting: str, message: str) -> Finding:
    return Finding.of(rules.LAUNCH_EXPOSED, setting, message, detector=DETECTOR)
