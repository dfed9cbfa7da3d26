"""A GET of an untrusted URL, bounded in bytes and in overall time (advisory feeds, the llama.cpp
source archive). https://, or plain http:// only to a loopback host; redirects are checked the same.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

from dflash_guard.errors import InputError
from dflash_guard.urls import http_endpoint


def is_loopback(host: str) -> bool:
    """Whether `host` is `localhost` or a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, what: str) -> None:
    """Refuse `url` unless https://, or http:// to a loopback host (`what` names it)."""
    parts = http_endpoint(url, f"{what} URL")
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):
        return
    raise InputError(f"{what} {url}: only https:// URLs are accepted "
                     "(plain http:// only for a loopback host)")


def download(url: str, sink: Callable[[bytes], None], *, what: str, max_bytes: int,
             timeout: float, missing_ok: bool = False) -> bool:
    """Stream `url`'s body into `sink` chunk by chunk; False when `missing_ok` and it is a 404.
    Past `max_bytes` (declared or received) or `timeout` seconds in all, an `InputError`: a
    server dripping bytes cannot hold us."""
    import httpx2

    check_url(url, what)
    size, deadline = 0, time.monotonic() + timeout
    try:
        with httpx2.Client(timeout=httpx2.Timeout(timeout), follow_redirects=True) as client, \
                client.stream("GET", url) as response:
            check_url(str(response.url), what)
            if response.status_code == 404 and missing_ok:
                return False
            if response.status_code != 200:
                raise InputError(f"{what} {url}: HTTP {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise InputError(f"{what} {url}: {declared} bytes is over the "
                                 f"{max_bytes:,}-byte limit")
            for chunk in response.iter_bytes():
                if time.monotonic() > deadline:
                    raise httpx2.TimeoutException("overall deadline")
                size += len(chunk)
                if size > max_bytes:
                    raise InputError(f"{what} {url}: over the {max_bytes:,}-byte limit")
                sink(chunk)
    except httpx2.TimeoutException:
        raise InputError(f"{what} {url}: timed out after {timeout:g} s") from None
    except httpx2.HTTPError as error:
        raise InputError(f"{what} {url}: {type(error).__name__}: {error}") from None
    return True
