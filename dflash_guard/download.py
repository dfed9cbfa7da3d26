"""A GET of an untrusted URL, bounded in bytes and in overall time (advisory feeds, the llama.cpp
source archive). https://, or plain http:// only to a loopback host (`urls.is_loopback`).
Redirects are followed by hand, at most `MAX_REDIRECTS`, and every `Location` is checked the same
before it is requested: a plain-http hop to another host is refused, never fetched, and so is a
hop from https down to http.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dflash_guard.errors import InputError
from dflash_guard.urls import http_endpoint, is_loopback

if TYPE_CHECKING:
    import httpx2

MAX_REDIRECTS = 5


def check_url(url: str, what: str) -> None:
    """Refuse `url` unless https://, or http:// to a loopback host (`what` names it)."""
    parts = http_endpoint(url, f"{what} URL")
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):
        return
    raise InputError(f"{what} {url}: only https:// URLs are accepted "
                     "(plain http:// only for a loopback host)")


def _next_hop(current: str, location: str, what: str, first: str) -> str:
    """Where a redirect from `current` leads, checked before anything is sent there."""
    import httpx2

    try:
        target = str(httpx2.URL(current).join(location))
    except (httpx2.InvalidURL, ValueError, TypeError):
        raise InputError(f"{what} {first}: a redirect to an unusable Location") from None
    check_url(target, f"{what} (redirected from {first})")
    if current.lower().startswith("https:") and not target.lower().startswith("https:"):
        raise InputError(f"{what} {first}: a redirect from https:// down to {target} is refused")
    return target


def download(url: str, sink: Callable[[bytes], None], *, what: str, max_bytes: int,
             timeout: float, missing_ok: bool = False) -> bool:
    """Stream `url`'s body into `sink` chunk by chunk; False when `missing_ok` and it is a 404.
    Past `max_bytes` (declared or received) or `timeout` seconds in all (redirects included),
    an `InputError`: a server dripping bytes cannot hold us."""
    import httpx2

    check_url(url, what)
    deadline = time.monotonic() + timeout
    current = url
    try:
        with httpx2.Client(timeout=httpx2.Timeout(timeout), follow_redirects=False) as client:
            for _ in range(MAX_REDIRECTS + 1):
                with client.stream("GET", current) as response:
                    if response.has_redirect_location:
                        current = _next_hop(current, response.headers.get("location", ""),
                                            what, url)
                        if time.monotonic() > deadline:
                            raise httpx2.TimeoutException("overall deadline")
                        continue
                    return _receive(response, sink, url, what, max_bytes, deadline, missing_ok)
    except httpx2.TimeoutException:
        raise InputError(f"{what} {url}: timed out after {timeout:g} s") from None
    except httpx2.HTTPError as error:
        raise InputError(f"{what} {url}: {type(error).__name__}: {error}") from None
    raise InputError(f"{what} {url}: more than {MAX_REDIRECTS} redirects")


def _receive(response: httpx2.Response, sink: Callable[[bytes], None], url: str, what: str,
             max_bytes: int, deadline: float, missing_ok: bool) -> bool:
    """The body of a final (non-redirect) answer into `sink`, bounded in bytes and time."""
    import httpx2

    if response.status_code == 404 and missing_ok:
        return False
    if response.status_code != 200:
        raise InputError(f"{what} {url}: HTTP {response.status_code}")
    declared = response.headers.get("content-length", "")
    # ASCII digits only (`int` reads other scripts' digits too), and no 5000-digit number
    if declared.isascii() and declared.isdigit() and (len(declared) > 18
                                                      or int(declared) > max_bytes):
        raise InputError(f"{what} {url}: {declared} bytes is over the {max_bytes:,}-byte limit")
    size = 0
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            raise httpx2.TimeoutException("overall deadline")
        size += len(chunk)
        if size > max_bytes:
            raise InputError(f"{what} {url}: over the {max_bytes:,}-byte limit")
        sink(chunk)
    return True
