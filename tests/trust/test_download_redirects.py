"""Issue 45 item 6 (Q12 and beyond): every hop of a redirect chain is checked before it is
requested, and loopback is one function (`urls.is_loopback`) that knows every spelling
`ipaddress` reads as loopback, the IPv4-mapped `::ffff:127.0.0.1` included."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dflash_guard.audit.feeds import FeedRules
from dflash_guard.audit.run import run_audit
from dflash_guard.download import MAX_REDIRECTS, _next_hop, check_url, download
from dflash_guard.errors import InputError
from dflash_guard.launch import plan
from dflash_guard.urls import is_loopback
from tests.support.audit import write_lock

Routes = dict[str, tuple[int, dict[str, str], bytes]]


@contextmanager
def redirecting(routes: Routes) -> Iterator[tuple[str, list[str]]]:
    """A plain-HTTP server on 127.0.0.1 answering `routes` (path -> status, headers, body);
    yields its base URL and the list of paths requested, in order."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            seen.append(self.path)
            status, headers, body = routes.get(self.path, (404, {}, b""))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value.replace("BASE", base))
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield base, seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _get(url: str, max_bytes: int = 1000) -> bytes:
    body = bytearray()
    download(url, body.extend, what="feed", max_bytes=max_bytes, timeout=10)
    return bytes(body)


def _to(location: str, status: int = 302) -> tuple[int, dict[str, str], bytes]:
    return status, {"Location": location}, b""


@pytest.mark.parametrize("hop", ["http://feeds.invalid/hop/feed.json",  # Q12: plain http
                                 "http://10.0.0.1/feed.json",  # a private address
                                 "http://127.1/feed.json",  # shorthand: not an address
                                 "ftp://127.0.0.1/feed.json",
                                 "http://user:s3cr3tvalue@127.0.0.1/feed.json",
                                 "http://[::1/feed.json"])
def test_a_bad_hop_is_refused_before_it_is_requested(hop):
    with redirecting({"/start/feed.json": _to(hop)}) as (base, seen), \
            pytest.raises(InputError) as error:
        _get(f"{base}/start/feed.json")
    assert seen == ["/start/feed.json"]  # the hop itself was never requested
    assert "s3cr3tvalue" not in str(error.value)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_loopback_hops_are_followed_relative_and_absolute(status):
    routes = {"/a": _to("/b", status), "/b": _to("BASE/c", status),
              "/c": (200, {}, b"the feed")}
    with redirecting(routes) as (base, seen):
        assert _get(f"{base}/a") == b"the feed"
    assert seen == ["/a", "/b", "/c"]


def test_a_chain_longer_than_the_limit_is_refused():
    routes = {f"/{i}": _to(f"/{i + 1}") for i in range(MAX_REDIRECTS + 1)}
    with redirecting(routes) as (base, seen), pytest.raises(InputError, match="redirects"):
        _get(f"{base}/0")
    assert len(seen) == MAX_REDIRECTS + 1


def test_a_redirect_loop_ends():
    with redirecting({"/a": _to("/a")}) as (base, _), pytest.raises(InputError,
                                                                      match="redirects"):
        _get(f"{base}/a")


def test_a_redirect_without_location_is_an_http_error():
    with redirecting({"/a": (302, {}, b"")}) as (base, _), pytest.raises(InputError,
                                                                          match="HTTP 302"):
        _get(f"{base}/a")


@pytest.mark.parametrize("length", ["9" * 5000, "99999999999999999999999", "1e9"])
def test_a_declared_length_never_crashes(length):
    """A 5000-digit Content-Length (past int()'s digit limit) is over the limit, not a
    traceback; a length that is not ASCII digits is ignored and the body counted."""
    with redirecting({"/a": (200, {"Content-Length": length}, b"")}) as (base, _), \
            pytest.raises(InputError):
        _get(f"{base}/a")


def test_https_down_to_http_is_refused_even_to_loopback():
    with pytest.raises(InputError, match="from https:// down to"):
        _next_hop("https://feeds.example/a", "http://127.0.0.1/b", "feed", "https://x")
    assert _next_hop("https://feeds.example/a", "/b", "feed", "x") == "https://feeds.example/b"


def test_an_audit_feed_through_a_plain_http_hop_is_refused(tmp_path: Path):
    """Q12 as the doc ran it: `audit` against a feed URL whose chain has a plain-http hop."""
    lock = write_lock(tmp_path / "dflash.lock", engine_commit="a" * 40)
    routes = {"/start/feed.json": _to("http://cdn.invalid/hop/feed.json"),
              "/real/feed.json": (200, {}, b"[]")}
    with redirecting(routes) as (base, seen), pytest.raises(InputError, match="only https://"):
        run_audit(lock, [f"{base}/start/feed.json"], rules=FeedRules())
    assert seen == ["/start/feed.json"]


LOOPBACK = ["localhost", "LocalHost", "127.0.0.1", "127.255.255.254", "::1", "[::1]",
            "::ffff:127.0.0.1", "[::ffff:127.0.0.2]", "::ffff:7f00:1", "::1%lo",
            "0:0:0:0:0:0:0:1"]
NOT_LOOPBACK = ["127.1", "0x7f.0.0.1", "0177.0.0.1", "2130706433", "localhost.",
                "localhost.localdomain", "127.0.0.1.nip.io", "0.0.0.0", "::", "::127.0.0.1",
                "::ffff:10.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "10.0.0.1",
                "example.com", "", "[]", "fe80::1%lo"]


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_spellings(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_not_loopback_spellings(host):
    assert not is_loopback(host)


def test_one_loopback_function():
    """`launch` (bind hosts) and downloads (plain-http URLs) decide with the same function."""
    assert plan.is_loopback is is_loopback
    check_url("http://[::ffff:127.0.0.1]:8080/feed.json", "feed")
    with pytest.raises(InputError):
        check_url("http://127.1:8080/feed.json", "feed")
