"""Every URL the tool is given is parsed and normalised here, once.

Three uses, three functions, one parser (`parse_url`):
- `http_endpoint(url, what)`: an engine, metrics or feed endpoint: http(s) with a host and a valid
  port, no credentials anywhere in it (`user:token@`, `?access_token=`), scheme and host
  lowercased, doubled slashes in the path collapsed;
- `check_recorded_url(url, what)`: an engine's git URL, written into a lockfile and so into every
  approval record: https/http/ssh/git/file or scp-like `git@host:org/repo`, never a credential
  (a password, a query or fragment, or an SSH user other than `git`: GitHub takes a token as
  the user name);
- `repo_key(url)`: what an advisory's repository and a lock's engine URL are compared by
  (`https://GitHub.com//Org/Repo.git/`, `git+ssh://git@github.com/org/repo` and
  `git@github.com:Org/Repo` are all `github.com/org/repo`; percent-escapes decoded).

A scheme that is not recognised is an error, never read as a path (`HTTPS://h/f` is a URL, and
`ftp://h/f` is refused, not opened as the folder `ftp:`). `has_scheme` says which is which.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit, urlunsplit

from dflash_guard.errors import InputError, shorten

HTTP_SCHEMES = ("http", "https")
GIT_SCHEMES = ("https", "http", "ssh", "git", "file")
SSH_USER = "git"
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP_RE = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>[^/].*)$")
# Query keys that carry a secret (`?access_token=`, `?api_key=`): refused in every URL.
_SECRET_KEY_RE = re.compile(r"token|key|secret|passw|auth|sig|credential", re.IGNORECASE)
_SECRET_HINT = ("credentials never go into a URL; let git find them (a credential helper, an SSH "
                "key) and pass an API key by its environment variable")


def is_loopback(host: str) -> bool:
    """Whether `host` (a URL's host or a bind address) is this machine: `localhost`, or an
    address `ipaddress` reads as loopback (`127.0.0.0/8`, `::1`, a scoped `::1%lo`, and the
    IPv4-mapped `::ffff:127.x.y.z`), brackets allowed. Anything else is another host, shorthand
    spellings included (`127.1`, `0x7f.1`, `2130706433`: not addresses to `ipaddress`, so they
    fail closed: refused for plain http, an API key required for a bind)."""
    name = host.strip().removeprefix("[").removesuffix("]")
    if name.casefold() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def has_scheme(value: str) -> bool:
    """Whether `value` is written as a URL (`SCHEME://...`, any case) rather than a path."""
    return bool(_SCHEME_RE.match(value))


def _printable(url: str, what: str) -> None:
    if not url or any(ch.isspace() or not ch.isprintable() for ch in url):
        raise InputError(f"{what}: not a URL: {shorten(url)}")


def parse_url(url: str, what: str, schemes: tuple[str, ...]) -> SplitResult:
    """`url` split and normalised (scheme and host lowercased, `//` in the path collapsed), or
    an `InputError` naming `what`: unparseable, a port out of range, a scheme not in `schemes`,
    or a credential in any part of it."""
    _printable(url, what)
    try:
        parts = urlsplit(url)
        port = parts.port  # parsing the port is the check (out of range raises)
    except ValueError as error:
        raise InputError(f"{what}: not a valid URL ({error})") from None
    if port == 0:
        raise InputError(f"{what}: port 0 is not a port")
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise InputError(f"{what}: scheme {scheme or '(none)'!r} is not one of "
                         f"{', '.join(schemes)}: {_redact(parts)}")
    if parts.password is not None:
        raise InputError(f"{what}: the URL carries credentials (user:token@); {_SECRET_HINT}")
    if any(_SECRET_KEY_RE.search(unquote(k)) for k, _ in parse_qsl(parts.query,
                                                                   keep_blank_values=True)):
        raise InputError(f"{what}: the URL carries a credential in its query; {_SECRET_HINT}")
    host = (parts.hostname or "").lower()
    if not host and scheme != "file":
        raise InputError(f"{what}: not a URL with a host: {_redact(parts)}")
    netloc = host if ":" not in host else f"[{host}]"
    if port is not None:
        netloc += f":{port}"
    if parts.username is not None:
        netloc = f"{parts.username}@{netloc}"
    path = re.sub(r"/{2,}", "/", parts.path)
    return SplitResult(scheme, netloc, path, parts.query, parts.fragment)


def _redact(parts: SplitResult) -> str:
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "", ""))


def http_endpoint(url: str, what: str) -> SplitResult:
    """An http(s) endpoint (engine, metrics, feed) normalised, or an `InputError`: any user
    name or password, or a secret in the query, is refused (a key goes in its variable)."""
    parts = parse_url(url, what, HTTP_SCHEMES)
    if "@" in parts.netloc:
        raise InputError(f"{what}: the URL carries credentials (user@); {_SECRET_HINT}")
    return parts


def is_http_endpoint(url: str) -> bool:
    """Whether `http_endpoint` accepts `url` (for schema checks that want a yes or no)."""
    try:
        http_endpoint(url, "url")
    except InputError:
        return False
    return True


def check_recorded_url(url: str, what: str) -> str:
    """`url` unchanged when it may be recorded in a lockfile; else an `InputError` naming `what`
    (the flag or field) that never repeats the credential itself."""
    _printable(url, what)
    if not has_scheme(url):
        user = url.split("@", 1)[0] if "@" in url else None
        if user is not None and user != SSH_USER:
            raise InputError(f"{what}: the URL carries credentials (only {SSH_USER}@ as the SSH "
                             f"user: a token can stand in for a user name); {_SECRET_HINT}")
        scp = _SCP_RE.match(url)
        if scp is None or "@" in scp["path"]:
            raise InputError(f"{what}: not a git URL (SCHEME://HOST/PATH or git@HOST:PATH): "
                             f"{shorten(url.rsplit('@', 1)[-1])}")
        return url
    parts = parse_url(url, what, GIT_SCHEMES)
    if parts.query or parts.fragment:
        raise InputError(f"{what}: a git URL has no query or fragment; {_SECRET_HINT}")
    user = parts.username
    if user is not None and (parts.scheme in HTTP_SCHEMES or user != SSH_USER):
        raise InputError(f"{what}: the URL carries credentials (user@; only {SSH_USER}@ over "
                         f"ssh); {_SECRET_HINT}")
    return url


def repo_key(url: str) -> str:
    """A repository URL reduced to `host/path` for matching (see the module docstring); a value
    that is no URL at all reduces to itself, lowercased."""
    text = url.strip().removeprefix("git+")
    if not has_scheme(text):
        scp = _SCP_RE.match(text)
        if scp is not None:
            text = f"ssh://{scp['host']}/{scp['path']}"
    try:
        parts = urlsplit(text)
    except ValueError:
        return text.casefold()
    host = (parts.hostname or "").casefold().removeprefix("www.")
    path = re.sub(r"/{2,}", "/", unquote(parts.path)).strip("/").casefold()
    while path.endswith(".git"):
        path = path.removesuffix(".git").rstrip("/")
    return f"{host}/{path}"


def metrics_url(engine_url: str) -> str:
    """An engine's Prometheus endpoint: `/metrics` at its origin (vLLM, SGLang, llama.cpp)."""
    parts = http_endpoint(engine_url, "engine")
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))
