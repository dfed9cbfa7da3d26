"""URLs the tool records (engine git URLs in a lockfile and so in an approval record), and an
engine's metrics URL (`metrics_url`).

A recorded URL is read by everyone who reads the lock: it must never carry a credential. An
http(s) URL with `user@` or `user:token@`, or an SSH/scp URL with `user:token@`, is refused, so
is a URL Python cannot parse (`http://[::1`) or whose port is out of range. `git@host:org/repo`
(a user name, no secret) stays allowed: it is how SSH clones are named.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from dflash_guard.errors import InputError, shorten

_SECRET_HINT = ("credentials never go into a lockfile or a record; let git find them (a "
                "credential helper, an SSH key)")


def check_recorded_url(url: str, what: str) -> str:
    """`url` unchanged when it may be recorded; else an `InputError` naming `what` (the flag or
    field) that never repeats the credential itself."""
    if not url or any(ch.isspace() or not ch.isprintable() for ch in url):
        raise InputError(f"{what}: not a URL: {shorten(url)}")
    if "://" not in url:  # scp-like `user@host:path`, or a local path
        user = url.split("@", 1)[0] if "@" in url else ""
        if ":" in user:
            raise InputError(f"{what}: the URL carries a password (user:token@); {_SECRET_HINT}")
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check (out of range raises)
    except ValueError as error:
        raise InputError(f"{what}: not a valid URL ({error})") from None
    if parts.password is not None or (parts.username and parts.scheme in ("http", "https")):
        raise InputError(f"{what}: the URL carries credentials (user:token@); {_SECRET_HINT}")
    if not parts.netloc and parts.scheme != "file":
        raise InputError(f"{what}: not a URL with a host: {shorten(url)}")
    return url


def metrics_url(engine_url: str) -> str:
    """An engine's Prometheus endpoint: `/metrics` at its origin (vLLM, SGLang, llama.cpp)."""
    parts = urlsplit(engine_url)
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))
